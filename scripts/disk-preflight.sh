#!/usr/bin/env bash
# Refuses to start the test run when the disk cannot hold it: a cold run fills the clone's
# target directory, builds images under the cache and runs a node on the same disk, and running
# out of space half-way fails every end-to-end test with causes far from the disk.
set -euo pipefail

root="${1:?usage: disk-preflight.sh <clone>}"
# A clean-clone run grew the disk's use by 3.9 GiB at its peak (README, first section): three
# times that leaves room for the node's images and logs.
need_gib="${BULWARK_MIN_FREE_GIB:-12}"
cache="${BULWARK_CACHE:-$HOME/.cache/bulwark}"
target="${CARGO_TARGET_DIR:-$root/target}"

free_gib() {
	local dir="$1"
	while [[ ! -e "$dir" ]]; do dir="$(dirname "$dir")"; done
	df -P -k "$dir" | awk 'NR == 2 { printf "%d", $4 / 1048576 }'
}

for dir in "$target" "$cache"; do
	have="$(free_gib "$dir")"
	echo "[test] $have GiB free for $dir (a run needs about $need_gib GiB)" >&2
	if (( have < need_gib )); then
		echo "[test] not enough disk: $have GiB free for $dir, the run needs $need_gib GiB (set BULWARK_MIN_FREE_GIB to override)" >&2
		exit 1
	fi
done
