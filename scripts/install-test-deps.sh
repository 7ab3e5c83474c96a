#!/usr/bin/env bash
# Installs what the real-parts tests and the benchmark need: MariaDB (server, client,
# mariabackup), sysbench, GNU time, zstd, openssl from Debian, and moto's S3 server in a
# Python venv kept outside the clone, at ${BULWARK_CACHE:-$HOME/.cache/bulwark}/moto-<version>/.
#
# Idempotent and quiet: when everything is present it does no network access and prints
# nothing. Run as root (CI does). We never use the distribution's MariaDB service: the tests
# start their own mariadbd on loopback, so any system mariadbd started by a package postinst
# is stopped here.
set -euo pipefail

MOTO_VERSION=5.2.5
CACHE_DIR="${BULWARK_CACHE:-$HOME/.cache/bulwark}"
VENV="$CACHE_DIR/moto-$MOTO_VERSION"
APT_PACKAGES=(mariadb-server mariadb-backup mariadb-client sysbench time zstd openssl)

log() { printf 'install-test-deps: %s\n' "$*" >&2; }

# Runs a command quietly; shows its output only when it fails.
quiet() {
  local out
  if ! out="$("$@" 2>&1)"; then
    printf '%s\n' "$out" >&2
    log "failed: $*"
    return 1
  fi
}

# The Python used for the venv must be able to create one (Debian's needs python3-venv).
PYTHON="${PYTHON:-python3}"
if [[ ! -f "$VENV/.installed" ]] &&
   { ! command -v "$PYTHON" >/dev/null 2>&1 || ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; }; then
  APT_PACKAGES+=(python3 python3-venv)
  PYTHON=/usr/bin/python3
fi

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done

if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    log "missing Debian packages (${missing[*]}); run this script as root"
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  log "installing ${missing[*]}"
  # Update the package lists only when they are absent or when an install from them fails.
  if ! compgen -G '/var/lib/apt/lists/*_Packages' >/dev/null; then
    quiet apt-get update
  fi
  if ! quiet apt-get install -y --no-install-recommends "${missing[@]}"; then
    quiet apt-get update
    quiet apt-get install -y --no-install-recommends "${missing[@]}"
  fi
  # A postinst may have started the system service (unless policy-rc.d denied it). Stop it
  # so that nothing listens on the default port or socket behind the tests' backs.
  if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
    systemctl disable --now mariadb >/dev/null 2>&1 || true
  elif command -v service >/dev/null 2>&1; then
    service mariadb stop >/dev/null 2>&1 || true
  fi
fi

# A system server (the distribution's service: started without --datadir, or on
# /var/lib/mysql, possibly under mysqld_safe) is stopped. Servers started with an explicit
# datadir elsewhere (the tests', the benchmark's, a colleague's) are left alone.
stop_pid() {
  kill "$1" 2>/dev/null || return 0
  for _ in $(seq 1 300); do
    kill -0 "$1" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -9 "$1" 2>/dev/null || true
}
if [[ $(id -u) -eq 0 ]]; then
  for pid in $(pgrep -x mysqld_safe 2>/dev/null || true); do
    log "stopping system mysqld_safe (pid $pid)"
    stop_pid "$pid"
  done
  for pid in $(pgrep -x mariadbd 2>/dev/null || true) $(pgrep -x mysqld 2>/dev/null || true); do
    args="$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null || true)"
    if grep -q -- '^--datadir=' <<<"$args" && ! grep -qx -- '--datadir=/var/lib/mysql/\{0,1\}' <<<"$args"; then
      continue
    fi
    log "stopping system mariadbd (pid $pid)"
    stop_pid "$pid"
  done
fi

if [[ ! -f "$VENV/.installed" ]]; then
  log "creating moto $MOTO_VERSION venv in $VENV"
  rm -rf "$VENV"
  mkdir -p "$CACHE_DIR"
  quiet "$PYTHON" -m venv "$VENV"
  quiet "$VENV/bin/pip" install --disable-pip-version-check --no-input "moto[server]==$MOTO_VERSION"
  "$VENV/bin/python" -c 'import boto3, moto.server' >/dev/null
  [[ -x "$VENV/bin/moto_server" ]] || { log "moto_server missing from $VENV/bin"; exit 1; }
  touch "$VENV/.installed"
fi
