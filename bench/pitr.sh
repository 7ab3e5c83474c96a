#!/usr/bin/env bash
# Point-in-time recovery figures on a real MariaDB, each against the standard tool in the same
# run (the ratios are what count; absolute numbers drift between machines):
#
#   bench/pitr.sh                         # ~256 MiB of binary log
#   BENCH_PITR_MIB=1024 bench/pitr.sh     # more
#
# Measured:
#   (1) streaming cost while the server writes BENCH_PITR_MIB of binlog: CPU seconds and peak RSS
#       of `mysql-backup archive` (encrypted, 5 s segments, to a local repository) against
#       `mariadb-binlog --read-from-remote-server --raw --stop-never` (the standard streaming
#       tool, which only writes the raw files) following the same server at the same time;
#   (2) replay time per GiB of binlog: `mysql-backup replay --until latest` into a server
#       restored from the base backup, against `mariadb-binlog <the server's own binlog files>
#       | mariadb` into another such server (same transactions); and the same replay with
#       `--replay-gtids server` (what a cluster bootstrapped from a logical backup runs: every
#       event rewritten to the server's identity, checksums computed again) into a third;
#   (3) RPO: a steady writer commits one row at a time (each acknowledged id logged); the server
#       and the archiver are killed together (the whole cluster lost); the base backup is
#       restored into a new server with `--until latest`; rows and seconds lost are the
#       acknowledged rows missing from it and the time between the last acknowledged commit
#       and the last restored one.
# Environment: BENCH_PITR_MIB (default 256), BENCH_BIN (mysql-backup binary; default: built
# in release mode), BENCH_WORKDIR (default a temporary directory).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MIB="${BENCH_PITR_MIB:-256}"
say() { printf '[pitr-bench] %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }
[[ "$MIB" =~ ^[0-9]+$ && "$MIB" -gt 0 ]] || die "BENCH_PITR_MIB must be a positive integer"

[[ $(id -u) -ne 0 ]] || "$ROOT/scripts/install-test-deps.sh" >&2
for tool in mariadbd mariadb-install-db mariadb mariadb-binlog openssl bc python3; do
	command -v "$tool" >/dev/null || die "$tool not found; run scripts/install-test-deps.sh as root"
done
if [[ -z "${BENCH_BIN:-}" ]]; then
	say "building mysql-backup (release)"
	cargo build --release --locked -q -p mysql-backup --manifest-path "$ROOT/Cargo.toml"
	BENCH_BIN="$ROOT/target/release/mysql-backup"
fi
WORK="${BENCH_WORKDIR:-$(mktemp -d /tmp/bulwark-pitr-bench.XXXXXX)}"
mkdir -p "$WORK"
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	[[ -n "${BENCH_WORKDIR:-}" ]] || rm -rf "$WORK"
}
trap cleanup EXIT
openssl rand -base64 32 >"$WORK/key"

# start_server NAME: a throwaway server with binary logging, socket $WORK/NAME.sock.
start_server() {
	local name="$1" dir="$WORK/$1"
	mkdir -p "$dir"
	mariadb-install-db --no-defaults --datadir="$dir/data" --auth-root-authentication-method=normal >/dev/null 2>&1
	mariadbd --no-defaults --datadir="$dir/data" --socket="$WORK/$name.sock" --skip-networking \
		--log-bin=binlog --server-id=1 --binlog-format=ROW --log-error="$dir/error.log" \
		--pid-file="$dir/pid" --innodb-buffer-pool-size=256M --innodb-log-file-size=256M \
		--innodb-flush-log-at-trx-commit=1 --sync-binlog=1 --max-binlog-size=64M \
		--user=root >/dev/null 2>&1 &
	PIDS+=($!)
	eval "${name}_pid=$!"
	for _ in $(seq 100); do
		mariadb --no-defaults -uroot -S "$WORK/$name.sock" -e 'SELECT 1' >/dev/null 2>&1 && return
		sleep 0.2
	done
	die "server $name did not start: $(tail -3 "$dir/error.log")"
}
sqlc() { mariadb --no-defaults -uroot -S "$WORK/$1.sock" -N -B -e "$2"; }
cpu_seconds() { awk '{printf "%.2f", ($14 + $15) / 100}' "/proc/$1/stat"; }
peak_rss_mib() { awk '/VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }

start_server src
sqlc src "CREATE DATABASE bench; CREATE TABLE bench.bulk (id BIGINT PRIMARY KEY, pad VARCHAR(1000));
          CREATE TABLE bench.steady (id BIGINT PRIMARY KEY, at DATETIME(6))"
"$BENCH_BIN" backup --repo "$WORK/repo" --method logical --encryption-key-file "$WORK/key" \
	--mysql-socket "$WORK/src.sock" --progress none >/dev/null
base_pos="$(sqlc src 'SELECT @@gtid_binlog_pos')"

# (1) both streamers follow the server while it writes.
MYSQL_BACKUP_LOG=warn "$BENCH_BIN" archive --repo "$WORK/repo" --encryption-key-file "$WORK/key" \
	--mysql-socket "$WORK/src.sock" --flush-every 5s 2>"$WORK/archive.log" &
archiver=$!
PIDS+=($archiver)
mkdir -p "$WORK/raw"
(cd "$WORK/raw" && exec mariadb-binlog --no-defaults --read-from-remote-server --raw --stop-never \
	--socket="$WORK/src.sock" --user=root --stop-never-slave-server-id=4000000002 binlog.000001) 2>"$WORK/raw.log" &
raw=$!
PIDS+=($raw)
sleep 1
rows_per_trx=4000   # 4000 x ~1 KiB rows: about 4 MiB of binlog per transaction
trx=$((MIB / 4))
say "writing ~${MIB} MiB of binlog in $trx transactions"
start=$(date +%s.%N)
for i in $(seq 0 $((trx - 1))); do
	from=$((i * rows_per_trx + 1)); to=$(((i + 1) * rows_per_trx))
	echo "INSERT INTO bench.bulk SELECT seq, REPEAT(MD5(seq), 30) FROM seq_${from}_to_${to};"
done | mariadb --no-defaults -uroot -S "$WORK/src.sock" bench
written=$(echo "$(date +%s.%N) - $start" | bc)
end_pos="$(sqlc src 'SELECT @@gtid_binlog_pos')"
binlog_bytes=$(sqlc src "SHOW BINARY LOGS" | awk '{s += $2} END {print s}')
# Both caught up: the archive reaches the end, the raw copy is as long as the server's logs.
for _ in $(seq 600); do
	through=$("$BENCH_BIN" list --repo "$WORK/repo" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["archives"]["default"]["through"] or "")')
	raw_bytes=$(du -cb "$WORK"/raw/binlog.* | tail -1 | cut -f1)
	[[ "$through" == "$end_pos" && "$raw_bytes" -ge "$binlog_bytes" ]] && break
	sleep 0.5
done
[[ "$through" == "$end_pos" ]] || die "the archive did not reach $end_pos (at $through)"
a_cpu=$(cpu_seconds $archiver); a_rss=$(peak_rss_mib $archiver)
r_cpu=$(cpu_seconds $raw); r_rss=$(peak_rss_mib $raw)
gib=$(echo "scale=4; $binlog_bytes / 1073741824" | bc)
say "streamed $(echo "$binlog_bytes / 1048576" | bc) MiB of binlog written in ${written}s"

# (3) RPO: steady writer, then everything dies at once.
say "steady writer for 12 s, then the server and the archiver are killed together"
(
	for i in $(seq 1 1000000); do
		if mariadb --no-defaults -uroot -S "$WORK/src.sock" -e "INSERT INTO bench.steady VALUES ($i, NOW(6))" 2>/dev/null; then
			echo "$i $(date +%s.%N)"
		else
			break
		fi
	done
) >"$WORK/acked" &
writer=$!
sleep 12
kill -9 "$src_pid" "$archiver" "$raw" 2>/dev/null || true
wait "$writer" 2>/dev/null || true
acked=$(wc -l <"$WORK/acked")
last_acked_at=$(tail -1 "$WORK/acked" | cut -d' ' -f2)

# (2) replay into servers restored from the base backup, and the RPO restore.
start_server ours
"$BENCH_BIN" restore --repo "$WORK/repo" --encryption-key-file "$WORK/key" latest \
	--mysql-socket "$WORK/ours.sock" --progress none >/dev/null
start_server theirs
"$BENCH_BIN" restore --repo "$WORK/repo" --encryption-key-file "$WORK/key" latest \
	--mysql-socket "$WORK/theirs.sock" --progress none >/dev/null
start_server own
"$BENCH_BIN" restore --repo "$WORK/repo" --encryption-key-file "$WORK/key" latest \
	--mysql-socket "$WORK/own.sock" --progress none >/dev/null
# Each replay runs on a quiet machine: the server replayed into before is counted, then shut
# down (its dirty pages flushed) and the page cache synced, so no replay pays for another's
# writes (the third replay measured 30% slower than the first for that alone).
settle() {
	local pid_var="${1}_pid"
	sqlc "$1" 'SHUTDOWN' >/dev/null 2>&1 || true
	while kill -0 "${!pid_var}" 2>/dev/null; do sleep 0.1; done
	sync
}
t0=$(date +%s.%N)
"$BENCH_BIN" replay --repo "$WORK/repo" --encryption-key-file "$WORK/key" latest \
	--mysql-socket "$WORK/ours.sock" --until latest >"$WORK/replay.out"
t1=$(date +%s.%N)
ours_bulk=$(sqlc ours 'SELECT COUNT(*) FROM bench.bulk')
restored=$(sqlc ours 'SELECT COUNT(*) FROM bench.steady')
last_restored_at=$(sqlc ours 'SELECT UNIX_TIMESTAMP(MAX(at)) FROM bench.steady')
settle ours
# The standard way: the server's own binlog files, from the backup's position on.
t2=$(date +%s.%N)
mariadb-binlog --no-defaults --start-position="$base_pos" "$WORK"/src/data/binlog.[0-9]* 2>/dev/null |
	mariadb --no-defaults -uroot -S "$WORK/theirs.sock"
t3=$(date +%s.%N)
theirs_bulk=$(sqlc theirs 'SELECT COUNT(*) FROM bench.bulk')
settle theirs
t4=$(date +%s.%N)
"$BENCH_BIN" replay --repo "$WORK/repo" --encryption-key-file "$WORK/key" latest \
	--mysql-socket "$WORK/own.sock" --until latest --replay-gtids server >"$WORK/replay-own.out"
t5=$(date +%s.%N)
own_bulk=$(sqlc own 'SELECT COUNT(*) FROM bench.bulk')
ours_s=$(echo "$t1 - $t0" | bc); theirs_s=$(echo "$t3 - $t2" | bc); own_s=$(echo "$t5 - $t4" | bc)
[[ "$ours_bulk" == "$theirs_bulk" && "$own_bulk" == "$theirs_bulk" ]] ||
	die "replays differ: $ours_bulk, $own_bulk vs $theirs_bulk bulk rows"
lost=$((acked - restored))
lost_s=$(echo "$last_acked_at - ${last_restored_at:-0}" | bc)

printf '\nPoint-in-time recovery, %s MiB of binlog (%s GiB)\n' "$(echo "$binlog_bytes / 1048576" | bc)" "$gib"
printf '  streaming CPU   : archive %6.2f s   mariadb-binlog --raw %6.2f s   ratio %.2f\n' "$a_cpu" "$r_cpu" "$(echo "scale=4; $a_cpu / ($r_cpu + 0.01)" | bc)"
printf '  streaming RSS   : archive %6s MiB mariadb-binlog --raw %6s MiB\n' "$a_rss" "$r_rss"
printf '  replay          : mysql-backup replay %6.1f s (%.1f s/GiB)   mariadb-binlog | mariadb %6.1f s (%.1f s/GiB)   ratio %.2f\n' \
	"$ours_s" "$(echo "scale=4; $ours_s / $gib" | bc)" "$theirs_s" "$(echo "scale=4; $theirs_s / $gib" | bc)" "$(echo "scale=4; $theirs_s / $ours_s" | bc)"
printf '  replay, own GTIDs: mysql-backup replay --replay-gtids server %6.1f s (%.1f s/GiB)   ratio to mariadb-binlog | mariadb %.2f\n' \
	"$own_s" "$(echo "scale=4; $own_s / $gib" | bc)" "$(echo "scale=4; $theirs_s / $own_s" | bc)"
printf '  RPO (all lost)  : %s of %s acknowledged rows lost, %.1f s of commits\n' "$lost" "$acked" "$lost_s"
