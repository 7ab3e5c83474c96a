#!/bin/bash
# Entrypoint of Bulwark's locally built MariaDB test image. It behaves like the official image's
# docker-entrypoint.sh for what the tests use: on an empty datadir it runs mariadb-install-db,
# sets the root password (MARIADB_ROOT_PASSWORD, MARIADB_ROOT_PASSWORD_FILE, or
# MARIADB_ALLOW_EMPTY_ROOT_PASSWORD; MYSQL_* aliases accepted), creates root@MARIADB_ROOT_HOST
# (default '%'), optionally MARIADB_DATABASE and MARIADB_USER/MARIADB_PASSWORD(_FILE), runs
# /docker-entrypoint-initdb.d/*.sql|*.sh, then execs the server. Started as root it prepares the
# directories and re-executes itself as mysql (uid 999); started as 999 it needs no privilege.
set -eo pipefail

note() { printf '%s [Note] [Entrypoint]: %s\n' "$(date --rfc-3339=seconds)" "$*"; }
die() {
	printf '%s [ERROR] [Entrypoint]: %s\n' "$(date --rfc-3339=seconds)" "$*" >&2
	exit 1
}

# Sets VAR from VAR, VAR_FILE or the MYSQL_ alias (the official image's precedence).
file_env() {
	local var="$1" alias="MYSQL_${1#MARIADB_}" value=""
	local file_var="${var}_FILE" alias_file_var="${alias}_FILE"
	if [[ -n "${!var:-}" ]]; then
		value="${!var}"
	elif [[ -n "${!file_var:-}" ]]; then
		value="$(<"${!file_var}")"
	elif [[ -n "${!alias:-}" ]]; then
		value="${!alias}"
	elif [[ -n "${!alias_file_var:-}" ]]; then
		value="$(<"${!alias_file_var}")"
	fi
	export "$var"="$value"
	unset "$file_var" "$alias" "$alias_file_var"
}

# Prints a server option as the server would see it (config files and arguments).
server_option() {
	local option="$1"
	shift
	"$@" --verbose --help 2>/dev/null |
		awk -v o="$option" '$1 == o && /^[^ \t]/ { sub(/^[^ \t]+[ \t]+/, ""); print; exit }'
}

sql_string() { printf "'%s'" "$(printf '%s' "$1" | sed -e "s/\\\\/\\\\\\\\/g" -e "s/'/\\\\'/g")"; }

if [[ "${1:0:1}" == - ]]; then
	set -- mariadbd "$@"
fi
if [[ "$1" != mariadbd && "$1" != mysqld ]] || [[ " $* " == *" --help "* || " $* " == *" --version "* ]]; then
	exec "$@"
fi

DATADIR="$(server_option datadir "$@")"
DATADIR="${DATADIR:-/var/lib/mysql/}"
SOCKET="$(server_option socket "$@")"
SOCKET="${SOCKET:-/run/mysqld/mysqld.sock}"

if [[ "$(id -u)" == 0 ]]; then
	mkdir -p "$DATADIR" "$(dirname "$SOCKET")"
	find "$DATADIR" "$(dirname "$SOCKET")" \! -user mysql -exec chown mysql:mysql '{}' +
	note "switching to user mysql"
	exec setpriv --reuid=mysql --regid=mysql --init-groups "${BASH_SOURCE[0]}" "$@"
fi

if [[ ! -d "$DATADIR/mysql" ]]; then
	file_env MARIADB_ROOT_PASSWORD
	file_env MARIADB_PASSWORD
	: "${MARIADB_DATABASE:=${MYSQL_DATABASE:-}}" "${MARIADB_USER:=${MYSQL_USER:-}}"
	: "${MARIADB_ROOT_HOST:=${MYSQL_ROOT_HOST:-%}}"
	: "${MARIADB_ALLOW_EMPTY_ROOT_PASSWORD:=${MYSQL_ALLOW_EMPTY_PASSWORD:-}}"
	if [[ -z "$MARIADB_ROOT_PASSWORD" && -z "$MARIADB_ALLOW_EMPTY_ROOT_PASSWORD" ]]; then
		die "database is uninitialized and no root password is set: set MARIADB_ROOT_PASSWORD," \
			"MARIADB_ROOT_PASSWORD_FILE or MARIADB_ALLOW_EMPTY_ROOT_PASSWORD"
	fi

	note "initializing database files in $DATADIR"
	mariadb-install-db --datadir="$DATADIR" --rpm --auth-root-authentication-method=normal \
		--skip-test-db --skip-log-bin --default-time-zone=SYSTEM --enforce-storage-engine= \
		--loose-innodb_buffer_pool_load_at_startup=0 --loose-innodb_buffer_pool_dump_at_shutdown=0 \
		>/dev/null

	note "starting a temporary server without networking"
	"$@" --skip-networking --socket="$SOCKET" --wsrep_on=OFF --skip-slave-start \
		--default-time-zone=SYSTEM --loose-innodb_buffer_pool_load_at_startup=0 &
	pid=$!
	sql() { mariadb --protocol=socket --socket="$SOCKET" -uroot --database=mysql "$@"; }
	for _ in $(seq 60); do
		sql -e 'SELECT 1' >/dev/null 2>&1 && break
		kill -0 "$pid" 2>/dev/null || die "the temporary server exited during start"
		sleep 1
	done
	sql -e 'SELECT 1' >/dev/null || die "the temporary server did not start"

	root_password="$(sql_string "$MARIADB_ROOT_PASSWORD")"
	{
		echo "SET @@SESSION.SQL_LOG_BIN=0;"
		echo "DROP USER IF EXISTS root@'127.0.0.1', root@'::1';"
		printf '%s\n' "EXECUTE IMMEDIATE CONCAT('DROP USER IF EXISTS root@\\'', @@hostname, '\\'');"
		echo "SET PASSWORD FOR 'root'@'localhost' = PASSWORD($root_password);"
		if [[ "$MARIADB_ROOT_HOST" != localhost ]]; then
			echo "CREATE USER 'root'@'$MARIADB_ROOT_HOST' IDENTIFIED BY $root_password;"
			echo "GRANT ALL ON *.* TO 'root'@'$MARIADB_ROOT_HOST' WITH GRANT OPTION;"
			echo "GRANT PROXY ON ''@'%' TO 'root'@'$MARIADB_ROOT_HOST' WITH GRANT OPTION;"
		fi
		echo "SET @@SESSION.SQL_LOG_BIN=1;"
		if [[ -n "$MARIADB_DATABASE" ]]; then
			echo "CREATE DATABASE IF NOT EXISTS \`$MARIADB_DATABASE\`;"
		fi
		if [[ -n "$MARIADB_USER" && -n "$MARIADB_PASSWORD" ]]; then
			echo "CREATE USER '$MARIADB_USER'@'%' IDENTIFIED BY $(sql_string "$MARIADB_PASSWORD");"
			if [[ -n "$MARIADB_DATABASE" ]]; then
				echo "GRANT ALL ON \`${MARIADB_DATABASE//_/\\_}\`.* TO '$MARIADB_USER'@'%';"
			fi
		fi
	} | sql --binary-mode

	# shellcheck disable=SC1090 # the init scripts are the user's
	source_init() { . "$1"; }
	export MYSQL_PWD="$MARIADB_ROOT_PASSWORD"
	for f in /docker-entrypoint-initdb.d/*; do
		case "$f" in
		*.sh) note "running $f" && source_init "$f" ;;
		*.sql) note "running $f" && sql --database="${MARIADB_DATABASE:-mysql}" <"$f" ;;
		*.sql.gz) note "running $f" && gunzip -c "$f" | sql --database="${MARIADB_DATABASE:-mysql}" ;;
		esac
	done
	unset MYSQL_PWD

	note "stopping the temporary server"
	kill "$pid"
	wait "$pid" || die "the temporary server did not stop cleanly"
	note "database initialized"
fi

exec "$@"
