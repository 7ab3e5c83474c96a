#!/usr/bin/env bash
# The main job on embedded defaults: back up a local MariaDB into a local repository directory,
# encrypted, then verify and list it. No cloud.
#
# Without MYSQL_BACKUP_MYSQL_SOCKET / MYSQL_BACKUP_MYSQL_HOST it starts its own MariaDB (datadir
# and socket under .bulwark-local/, no TCP port) with a small sample database, and stops it on
# exit. The repository defaults to ./backup-repo (MYSQL_BACKUP_REPO overrides, s3:// works too);
# the key is .bulwark-local/backup.key (MYSQL_BACKUP_ENCRYPTION_KEY_FILE overrides).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
LOCAL="$ROOT/.bulwark-local"
REPO="${MYSQL_BACKUP_REPO:-$ROOT/backup-repo}"
say() { printf '[run-local] %s\n' "$*" >&2; }

if [[ $(id -u) -eq 0 ]]; then
  bash scripts/install-test-deps.sh
fi
for tool in mariadbd mariadb-install-db mariadb-backup mariadb openssl; do
  command -v "$tool" >/dev/null 2>&1 || [[ -x "/usr/sbin/$tool" ]] || {
    say "$tool is missing: run scripts/install-test-deps.sh as root"
    exit 1
  }
done
export PATH="$PATH:/usr/sbin"

say "building mysql-backup (release)"
cargo build --release --quiet -p mysql-backup
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/mysql-backup"

mkdir -p "$LOCAL"
KEY="${MYSQL_BACKUP_ENCRYPTION_KEY_FILE:-$LOCAL/backup.key}"
if [[ ! -s "$KEY" ]]; then
  (umask 077 && openssl rand -base64 32 > "$KEY")
  say "generated encryption key $KEY (keep it apart from the backups)"
fi

conn=()
if [[ -z "${MYSQL_BACKUP_MYSQL_SOCKET:-}" && -z "${MYSQL_BACKUP_MYSQL_HOST:-}" ]]; then
  DATADIR="$LOCAL/mariadb"
  SOCK="$LOCAL/mariadb.sock"
  user_args=()
  [[ $(id -u) -eq 0 ]] && user_args=(--user=root)
  if [[ ! -d "$DATADIR/mysql" ]]; then
    say "initialising a local MariaDB in $DATADIR"
    mariadb-install-db --no-defaults --datadir="$DATADIR" --auth-root-authentication-method=normal \
      --skip-test-db "${user_args[@]}" >"$LOCAL/install.log" 2>&1
    fresh=1
  fi
  mariadbd --no-defaults --datadir="$DATADIR" --socket="$SOCK" --skip-networking \
    --log-bin=binlog --server-id=1 --innodb-buffer-pool-size=128M "${user_args[@]}" \
    --pid-file="$LOCAL/mariadb.pid" --log-error="$LOCAL/mariadb.err" &
  SERVER_PID=$!
  trap 'mariadb-admin --socket="$SOCK" -uroot shutdown 2>/dev/null || kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null || true' EXIT
  for _ in $(seq 1 300); do
    mariadb --socket="$SOCK" -uroot -e 'SELECT 1' >/dev/null 2>&1 && break
    kill -0 "$SERVER_PID" 2>/dev/null || { say "mariadbd failed to start: see $LOCAL/mariadb.err"; exit 1; }
    sleep 0.1
  done
  if [[ -n "${fresh:-}" ]]; then
    say "loading a sample database"
    mariadb --socket="$SOCK" -uroot <<'SQL'
CREATE DATABASE shop;
CREATE TABLE shop.orders (id INT PRIMARY KEY, customer VARCHAR(64), amount DECIMAL(10,2), note TEXT, KEY (customer)) ENGINE=InnoDB;
INSERT INTO shop.orders SELECT seq, CONCAT('customer-', seq % 977), seq % 10000 / 100, REPEAT(MD5(seq), 8) FROM shop.seq_1_to_200000;
CREATE VIEW shop.big_orders AS SELECT * FROM shop.orders WHERE amount > 90;
SQL
  fi
  conn=(--mysql-socket "$SOCK" --mysql-user root)
fi

say "backing up into $REPO"
"$BIN" backup --repo "$REPO" "${conn[@]}" --encryption-key-file "$KEY"
"$BIN" verify --repo "$REPO" --encryption-key-file "$KEY" latest
"$BIN" list --repo "$REPO" --encryption-key-file "$KEY"
say "restore with: $BIN restore --repo $REPO --encryption-key-file $KEY latest --target-dir /path/to/new/datadir"
