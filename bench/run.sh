#!/usr/bin/env bash
# Benchmark of the backup engine against the standard-tool pipelines, side by side on the same
# data in one run (absolute numbers drift between machines; the ratios are what count).
#
#   bench/run.sh                      # 8 x 1,000,000 sysbench rows (~2 GB), zstd level 1
#   BENCH_ROWS=20000 bench/run.sh     # quick run on small data
#   BENCH_LEVELS="1 3" REPEAT=3 bench/run.sh
#   BENCH_BASELINES_ONLY=1 bench/run.sh   # only the standard-tool pipelines (no build)
#
# Environment: BENCH_ROWS (rows per table, default 1000000), BENCH_LEVELS (zstd levels,
# default "1"), REPEAT (runs per measurement, best kept, default 2), BENCH_BIN (use this
# mysql-backup binary instead of building), BULWARK_CACHE (cache dir, default
# ~/.cache/bulwark: the prepared datadir is kept there, keyed by size and MariaDB version),
# BENCH_WORKDIR (where outputs are written, default the cache dir).
#
# Measured (wall seconds, best of REPEAT rounds; peak RSS of the largest process via GNU time):
#   (a) mysql-backup backup --method physical, zstd level L, encrypted
#   (b) mariabackup --stream=xbstream | zstd -L -T0 | openssl enc -aes-256-ctr | tee >(sha256sum) > file
#   (c) mariabackup --stream=xbstream | zstd -L -T0 > file
#   (d) mysql-backup restore --skip-prepare
#   (e) tee >(sha256sum) < file_b | openssl enc -d | zstd -d | mbstream -x
#   (f) mysql-backup restore (with prepare)   vs   (e) + mariabackup --prepare
#   (h) mysql-backup drill (restore with prepare, a scratch server, CHECK TABLE of every table)
#       vs (i) the same by hand: (e) + mariabackup --prepare + mariadbd + mariadb-check + shutdown
# Ratios are baseline_seconds / our_seconds (> 1 means we are faster). Targets:
#   backup (b)/(a) >= 1.3, backup (c)/(a) >= 0.9, restore (e)/(d) >= 1.3.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH_ROWS="${BENCH_ROWS:-1000000}"
BENCH_TABLES=8
BENCH_LEVELS="${BENCH_LEVELS:-1}"
REPEAT="${REPEAT:-2}"
CACHE="${BULWARK_CACHE:-$HOME/.cache/bulwark}"
BASELINES_ONLY="${BENCH_BASELINES_ONLY:-0}"

say() { printf '[bench] %s\n' "$*" >&2; }
die() { printf '[bench] ERROR: %s\n' "$*" >&2; exit 1; }

[[ "$BENCH_ROWS" =~ ^[0-9]+$ && "$BENCH_ROWS" -gt 0 ]] || die "BENCH_ROWS must be a positive integer"
[[ "$REPEAT" =~ ^[0-9]+$ && "$REPEAT" -gt 0 ]] || die "REPEAT must be a positive integer"
for level in $BENCH_LEVELS; do
  [[ "$level" =~ ^[0-9]+$ && "$level" -ge 1 && "$level" -le 19 ]] || die "zstd level $level not in 1..19"
done

# ---------------------------------------------------------------- dependencies and binary
if [[ $(id -u) -eq 0 ]]; then
  "$ROOT/scripts/install-test-deps.sh"
fi
for tool in mariadbd mariadb-install-db mariadb-admin mariabackup mbstream sysbench zstd openssl sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || [[ -x "/usr/sbin/$tool" ]] ||
    die "$tool not found; run scripts/install-test-deps.sh as root"
done
[[ -x /usr/bin/time ]] || die "GNU time (/usr/bin/time) not found; run scripts/install-test-deps.sh as root"
MARIADBD="$(command -v mariadbd || echo /usr/sbin/mariadbd)"

BIN=""
if [[ "$BASELINES_ONLY" != 1 ]]; then
  if [[ -n "${BENCH_BIN:-}" ]]; then
    BIN="$BENCH_BIN"
  else
    say "building mysql-backup (release)"
    (cd "$ROOT" && cargo build --release -p mysql-backup) ||
      die "cargo build --release -p mysql-backup failed (set BENCH_BASELINES_ONLY=1 to measure the baselines alone)"
    BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/mysql-backup"
  fi
  [[ -x "$BIN" ]] || die "mysql-backup binary not found at $BIN (set BENCH_BIN, or BENCH_BASELINES_ONLY=1)"
fi

# ---------------------------------------------------------------- cleanup on exit
WORK=""
SERVER_PID=""
SOCKET=""

stop_server() {
  [[ -n "$SERVER_PID" ]] || return 0
  if kill -0 "$SERVER_PID" 2>/dev/null; then
    mariadb-admin --no-defaults --user=root --socket="$SOCKET" shutdown >/dev/null 2>&1 &
    local admin=$!
    local i
    for i in $(seq 1 600); do
      kill -0 "$SERVER_PID" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$SERVER_PID" 2>/dev/null; then
      say "mariadbd did not stop in 60 s; killing it"
      kill -9 "$SERVER_PID" 2>/dev/null || true
    fi
    kill "$admin" 2>/dev/null || true
    wait "$admin" 2>/dev/null || true
  fi
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}

cleanup() {
  local rc=$?
  stop_server
  [[ -n "$WORK" && -d "$WORK" ]] && rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$CACHE"
WORK="$(mktemp -d "${BENCH_WORKDIR:-$CACHE}/bench-run.XXXXXX")"
SOCKET="$WORK/mysqld.sock"

# ---------------------------------------------------------------- server on the cached datadir
MARIADB_VERSION="$("$MARIADBD" --version | awk '{print $3}')"
DATA_CACHE="$CACHE/bench-data/sysbench-${BENCH_TABLES}x${BENCH_ROWS}-${MARIADB_VERSION}"
DATADIR="$DATA_CACHE/datadir"
PIDFILE="$DATA_CACHE/mariadbd.pid"

# A server left running on the cached datadir by an interrupted run of this script is stopped.
stop_stale_server() {
  [[ -f "$PIDFILE" ]] || return 0
  local pid
  pid="$(cat "$PIDFILE" 2>/dev/null || true)"
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null &&
     tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "--datadir=$DATADIR"; then
    say "stopping a mariadbd left running on $DATADIR (pid $pid)"
    kill "$pid" 2>/dev/null || true
    local i
    for i in $(seq 1 600); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$PIDFILE"
}

start_server() {
  stop_stale_server
  local user_arg=()
  [[ $(id -u) -eq 0 ]] && user_arg=(--user=root)
  # Loopback only: no TCP listener at all, the unix socket lives in the work dir.
  "$MARIADBD" --no-defaults --datadir="$DATADIR" --socket="$SOCKET" --skip-networking \
    --pid-file="$PIDFILE" --log-error="$WORK/mariadbd.err" --tmpdir="$WORK" \
    --log-bin=binlog --server-id=1 --binlog-format=ROW \
    --innodb-buffer-pool-size=512M --innodb-log-file-size=256M \
    --innodb-flush-log-at-trx-commit=2 --character-set-server=utf8mb4 \
    "${user_arg[@]}" >>"$WORK/mariadbd.err" 2>&1 &
  SERVER_PID=$!
  local i
  for i in $(seq 1 1800); do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      tail -n 30 "$WORK/mariadbd.err" >&2
      SERVER_PID=""
      die "mariadbd exited during startup"
    fi
    if mariadb-admin --no-defaults --user=root --socket="$SOCKET" ping >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.1
  done
  tail -n 30 "$WORK/mariadbd.err" >&2
  die "mariadbd did not accept connections within 180 s"
}

if [[ ! -f "$DATA_CACHE/.complete" ]]; then
  say "preparing ${BENCH_TABLES} x ${BENCH_ROWS} sysbench rows in $DATA_CACHE (once; reused later)"
  stop_stale_server
  rm -rf "$DATA_CACHE"
  mkdir -p "$DATA_CACHE"
  install_user=()
  [[ $(id -u) -eq 0 ]] && install_user=(--user=root)
  mariadb-install-db --no-defaults --datadir="$DATADIR" --auth-root-authentication-method=normal \
    --skip-test-db --skip-name-resolve --tmpdir="$WORK" "${install_user[@]}" >"$WORK/install.log" 2>&1 ||
    { tail -n 20 "$WORK/install.log" >&2; die "mariadb-install-db failed"; }
  start_server
  mariadb --no-defaults --user=root --socket="$SOCKET" -e 'CREATE DATABASE sbtest'
  prep_start=$(date +%s.%N)
  sysbench oltp_read_write --db-driver=mysql --mysql-socket="$SOCKET" --mysql-user=root \
    --mysql-db=sbtest --tables="$BENCH_TABLES" --table-size="$BENCH_ROWS" --threads=2 \
    prepare >"$WORK/sysbench.log" 2>&1 || { tail -n 20 "$WORK/sysbench.log" >&2; die "sysbench prepare failed"; }
  prep_end=$(date +%s.%N)
  stop_server
  touch "$DATA_CACHE/.complete"
  say "sysbench prepare took $(awk -v a="$prep_start" -v b="$prep_end" 'BEGIN{printf "%.1f", b-a}') s"
fi

start_server
# The binary log of the data load (and of earlier runs) is not part of a backup: drop it, so
# the datadir and the page-cache warm-up hold only what is measured.
mariadb --no-defaults --user=root --socket="$SOCKET" -e 'RESET MASTER'
say "MariaDB $MARIADB_VERSION on $DATADIR ($(du -sh "$DATADIR" | cut -f1)), $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)"

# ---------------------------------------------------------------- measurement helpers
# Page cache: read every datadir file once, so all runs start warm.
find "$DATADIR" -type f -exec cat {} + >/dev/null

# Best (lowest) wall seconds with the CPU seconds (user + system, children included) of that
# run, the largest peak RSS (KiB) and the output size of a measurement, by name.
declare -A SECS CPU RSS OWNRSS OUTBYTES RESTORESECS

# measure_once NAME SETUP_CMD CMD OUTPUT_PATH KEEP ROUND: runs SETUP_CMD (untimed), then CMD
# under `bash -o pipefail` and GNU time; records the time, peak RSS and size of OUTPUT_PATH
# (if given), then deletes OUTPUT_PATH unless KEEP is 1 (a later measurement reads it).
measure_once() {
  local name=$1 setup=$2 cmd=$3 output=$4 keep=$5 round=$6 secs rss user sys
  bash -o pipefail -c "$setup" || die "setup of $name failed"
  sync
  if ! /usr/bin/time -f '%e %M %U %S' -o "$WORK/time.out" bash -o pipefail -c "$cmd" >"$WORK/run.log" 2>&1; then
    tail -n 30 "$WORK/run.log" >&2
    die "$name failed (command: $cmd)"
  fi
  read -r secs rss user sys < <(tail -n 1 "$WORK/time.out")
  say "$(printf '%-44s round %d: %6.2f s, CPU %6.2f s, peak RSS %d MiB' "$name" "$round" "$secs" "$(awk -v u="$user" -v s="$sys" 'BEGIN{print u+s}')" $((rss / 1024)))"
  if [[ -z "${SECS[$name]:-}" ]] || awk -v a="$secs" -v b="${SECS[$name]}" 'BEGIN{exit !(a<b)}'; then
    SECS[$name]=$secs
    CPU[$name]=$(awk -v u="$user" -v s="$sys" 'BEGIN{printf "%.2f", u+s}')
    # A drill reports how much of its time the restore took (--json: restoreSeconds).
    RESTORESECS[$name]=$(grep -o '"restoreSeconds": *[0-9.]*' "$WORK/run.log" | grep -o '[0-9.]*$' || true)
  fi
  if [[ -z "${RSS[$name]:-}" || "$rss" -gt "${RSS[$name]}" ]]; then
    RSS[$name]=$rss
  fi
  # mysql-backup reports its own peak RSS (without the tools it runs) with --json.
  local own
  own=$(grep -o '"peakRssBytes": *[0-9]*' "$WORK/run.log" | grep -o '[0-9]*$' || true)
  if [[ -n "$own" ]] && [[ -z "${OWNRSS[$name]:-}" || "$own" -gt "${OWNRSS[$name]}" ]]; then
    OWNRSS[$name]=$own
  fi
  if [[ -n "$output" ]]; then
    OUTBYTES[$name]=$(du -sb "$output" 2>/dev/null | cut -f1 || echo 0)
    [[ "$keep" == 1 ]] || rm -rf "$output"
  fi
}

# Measurements are planned, then run in REPEAT rounds of one run each, so that a transient
# load on the machine hits the pipelines being compared alike.
PLAN=()
# plan NAME SETUP_CMD CMD OUTPUT_PATH KEEP
plan() { PLAN+=("$1" "$2" "$3" "$4" "$5"); }
run_plan() {
  local round i
  for round in $(seq 1 "$REPEAT"); do
    for ((i = 0; i < ${#PLAN[@]}; i += 5)); do
      measure_once "${PLAN[i]}" "${PLAN[i + 1]}" "${PLAN[i + 2]}" "${PLAN[i + 3]}" "${PLAN[i + 4]}" "$round"
    done
  done
  PLAN=()
}

ratio() { awk -v base="$1" -v ours="$2" 'BEGIN{ if (ours > 0) printf "%.2f", base / ours; else print "n/a" }'; }
verdict() { awk -v r="$1" -v t="$2" 'BEGIN{ print (r + 0 >= t) ? "PASS" : "MISS" }'; }

# ---------------------------------------------------------------- keys and stream size
KEYFILE="$WORK/key.b64"
openssl rand -base64 32 >"$KEYFILE"
AES_KEY="$(openssl rand -hex 32)"
AES_IV="$(openssl rand -hex 16)"
MB_COMMON="--backup --stream=xbstream --socket=$SOCKET --user=root"

plan "mariabackup stream only" \
  "rm -rf '$WORK/mb-tmp' && mkdir -p '$WORK/mb-tmp'" \
  "mariabackup $MB_COMMON --target-dir='$WORK/mb-tmp' | wc -c > '$WORK/stream.bytes'" \
  "" 1
run_plan
STREAM_BYTES=$(cat "$WORK/stream.bytes")
say "xbstream size: $((STREAM_BYTES / 1024 / 1024)) MiB"

mbps() { awk -v b="$STREAM_BYTES" -v s="$1" 'BEGIN{ if (s > 0) printf "%.0f", b / s / 1e6; else print "-" }'; }

SUMMARY=()
ALL_PASS=1

for L in $BENCH_LEVELS; do
  say "=== zstd level $L ==="
  A="(a) mysql-backup backup L$L"
  B="(b) mariabackup|zstd|openssl|tee L$L"
  C="(c) mariabackup|zstd L$L"
  D="(d) mysql-backup restore --skip-prepare L$L"
  E="(e) tee|openssl -d|zstd -d|mbstream L$L"
  F="(f) mysql-backup restore L$L"
  G="(g) (e) + mariabackup --prepare L$L"
  H="(h) mysql-backup drill L$L"
  I="(i) (g) + mariadbd + mariadb-check L$L"

  # Backups. (d) and (f) restore the last (a); (e) and (g) read the last (b).
  if [[ -n "$BIN" ]]; then
    plan "$A" \
      "rm -rf '$WORK/repo' && mkdir -p '$WORK/repo'" \
      "'$BIN' backup --repo '$WORK/repo' --method physical --mysql-socket '$SOCKET' --mysql-user root --compression-level $L --encryption-key-file '$KEYFILE' --json" \
      "$WORK/repo" 1
  fi
  plan "$B" \
    "rm -rf '$WORK/mb-tmp' '$WORK/b.xbs.zst.enc' && mkdir -p '$WORK/mb-tmp'" \
    "mariabackup $MB_COMMON --target-dir='$WORK/mb-tmp' | zstd -q -$L -T0 | openssl enc -aes-256-ctr -K $AES_KEY -iv $AES_IV | tee >(sha256sum >/dev/null) > '$WORK/b.xbs.zst.enc'" \
    "$WORK/b.xbs.zst.enc" 1
  plan "$C" \
    "rm -rf '$WORK/mb-tmp' '$WORK/c.xbs.zst' && mkdir -p '$WORK/mb-tmp'" \
    "mariabackup $MB_COMMON --target-dir='$WORK/mb-tmp' | zstd -q -$L -T0 > '$WORK/c.xbs.zst'" \
    "$WORK/c.xbs.zst" 0
  run_plan

  # Restores.
  BASELINE_RESTORE="tee >(sha256sum >/dev/null) < '$WORK/b.xbs.zst.enc' | openssl enc -d -aes-256-ctr -K $AES_KEY -iv $AES_IV | zstd -q -d | mbstream -x"
  if [[ -n "$BIN" ]]; then
    plan "$D" \
      "rm -rf '$WORK/restore-d'" \
      "'$BIN' restore --repo '$WORK/repo' --encryption-key-file '$KEYFILE' latest --target-dir '$WORK/restore-d' --skip-prepare --json" \
      "$WORK/restore-d" 0
  fi
  plan "$E" \
    "rm -rf '$WORK/restore-e' && mkdir -p '$WORK/restore-e'" \
    "$BASELINE_RESTORE -C '$WORK/restore-e' && test -f '$WORK/restore-e/xtrabackup_checkpoints'" \
    "$WORK/restore-e" 0
  if [[ -n "$BIN" ]]; then
    plan "$F" \
      "rm -rf '$WORK/restore-f'" \
      "'$BIN' restore --repo '$WORK/repo' --encryption-key-file '$KEYFILE' latest --target-dir '$WORK/restore-f' --json" \
      "$WORK/restore-f" 0
  fi
  plan "$G" \
    "rm -rf '$WORK/restore-g' && mkdir -p '$WORK/restore-g'" \
    "$BASELINE_RESTORE -C '$WORK/restore-g' && mariabackup --prepare --target-dir='$WORK/restore-g'" \
    "$WORK/restore-g" 0
  run_plan

  # Drills: a restore proven by starting a server on it and checking every table.
  if [[ -n "$BIN" ]]; then
    plan "$H" \
      "rm -rf '$WORK/drill-h' && mkdir -p '$WORK/drill-h'" \
      "'$BIN' drill --repo '$WORK/repo' --encryption-key-file '$KEYFILE' latest --scratch-dir '$WORK/drill-h' --json" \
      "" 0
  fi
  HAND_SOCKET="$WORK/drill-i.sock"
  HAND_ADMIN="mariadb-admin --no-defaults --user=root --socket='$HAND_SOCKET'"
  HAND_USER=""
  [[ $(id -u) -eq 0 ]] && HAND_USER="--user=root"
  plan "$I" \
    "rm -rf '$WORK/restore-i' && mkdir -p '$WORK/restore-i'" \
    "$BASELINE_RESTORE -C '$WORK/restore-i' && mariabackup --prepare --target-dir='$WORK/restore-i' && { '$MARIADBD' --no-defaults --datadir='$WORK/restore-i' --socket='$HAND_SOCKET' --skip-networking --pid-file='$WORK/drill-i.pid' --log-error='$WORK/drill-i.err' --tmpdir='$WORK' $HAND_USER & pid=\$!; for n in \$(seq 1 1800); do $HAND_ADMIN ping >/dev/null 2>&1 && break; sleep 0.1; done; mariadb-check --no-defaults --user=root --socket='$HAND_SOCKET' --all-databases --check >/dev/null; rc=\$?; $HAND_ADMIN shutdown; wait \$pid; exit \$rc; }" \
    "$WORK/restore-i" 0
  run_plan
  rm -rf "$WORK/b.xbs.zst.enc" "$WORK/repo"

  # ------------------------------------------------------------ table for this level
  printf '\nzstd level %s, %s x %s rows, input stream %s MiB, best of %s\n' \
    "$L" "$BENCH_TABLES" "$BENCH_ROWS" "$((STREAM_BYTES / 1024 / 1024))" "$REPEAT"
  printf '%-44s %8s %8s %8s %10s %12s %14s %14s\n' "measurement" "seconds" "CPU s" "MB/s" "out MiB" "vs baseline" "peak RSS MiB*" "own RSS MiB**"
  row() { # name baseline_name
    local name=$1 base=${2:-} vs="-" out="-"
    [[ -n "${SECS[$name]:-}" ]] || return 0
    [[ -n "$base" && -n "${SECS[$base]:-}" ]] && vs="$(ratio "${SECS[$base]}" "${SECS[$name]}")x"
    [[ -n "${OUTBYTES[$name]:-}" ]] && out=$(( OUTBYTES[$name] / 1024 / 1024 ))
    local own="-"
    [[ -n "${OWNRSS[$name]:-}" ]] && own=$(( OWNRSS[$name] / 1024 / 1024 ))
    printf '%-44s %8.2f %8s %8s %10s %12s %14s %14s\n' "$name" "${SECS[$name]}" "${CPU[$name]}" "$(mbps "${SECS[$name]}")" \
      "$out" "$vs" "$(( ${RSS[$name]} / 1024 ))" "$own"
  }
  row "mariabackup stream only"
  row "$A" "$B"
  row "$B"
  row "$C"
  row "$D" "$E"
  row "$E"
  row "$F" "$G"
  row "$G"
  row "$H" "$I"
  row "$I"
  if [[ -n "${RESTORESECS[$H]:-}" ]]; then
    printf '(h): the restore (to a running scratch server) took %.2f s of the drill\n' "${RESTORESECS[$H]}"
  fi
  printf '* peak RSS of the largest single process of the measurement (GNU time %%M)\n'
  printf '** peak RSS of mysql-backup itself (getrusage), without the tools it starts\n'

  if [[ -n "$BIN" ]]; then
    r_ab=$(ratio "${SECS[$B]}" "${SECS[$A]}")
    r_ac=$(ratio "${SECS[$C]}" "${SECS[$A]}")
    r_de=$(ratio "${SECS[$E]}" "${SECS[$D]}")
    r_fg=$(ratio "${SECS[$G]}" "${SECS[$F]}")
    r_hi=$(ratio "${SECS[$I]}" "${SECS[$H]}")
    for check in "backup (a) vs (b) full pipeline|$r_ab|1.3" "backup (a) vs (c) compression only|$r_ac|0.9" \
                 "restore (d) vs (e)|$r_de|1.3"; do
      IFS='|' read -r label value target <<<"$check"
      v=$(verdict "$value" "$target")
      [[ "$v" == PASS ]] || ALL_PASS=0
      SUMMARY+=("$(printf 'L%-3s %-36s %6sx  target >= %-4s %s' "$L" "$label" "$value" "$target" "$v")")
    done
    SUMMARY+=("$(printf 'L%-3s %-36s %6sx  (no target)' "$L" "restore+prepare (f) vs (e)+prepare" "$r_fg")")
    SUMMARY+=("$(printf 'L%-3s %-36s %6sx  (no target)' "$L" "drill (h) vs by hand (i)" "$r_hi")")
  fi
done

printf '\nratios = baseline seconds / mysql-backup seconds (> 1: mysql-backup is faster)\n'
if [[ -n "$BIN" ]]; then
  printf '%s\n' "${SUMMARY[@]}"
  if [[ "$ALL_PASS" == 1 ]]; then printf 'all targets met\n'; else printf 'some targets missed\n'; fi
else
  printf 'baselines only (BENCH_BASELINES_ONLY=1): no ratios\n'
fi
