#!/usr/bin/env bash
# The end-to-end tests (crates/e2e) on the running test node, two binaries at a time, then the
# ones that act on whole nodes alone. Every paired binary works in namespaces of its own, with
# its own clusters, and its faults (a pod deleted, a server killed, one pod's traffic dropped)
# touch only its own pods, so two run side by side honestly: the node's two cores are otherwise
# idle much of the time while clusters start and failovers count. failover.rs cordons a node,
# and the chaos cases stop whole nodes, cut traffic between nodes and drain a node, which every
# pod on those nodes would feel, and kill the operator every cluster shares: they run with
# nothing beside them.
#
#   scripts/e2e.sh
#
# Builds the binaries (`cargo test -p bulwark-e2e --no-run`, plus the workspace's binaries
# they install), runs the crate's own unit tests first, then each test binary with the
# harness' usual output, one binary's block at a time, and exits non-zero when any failed. Needs what scripts/test.sh exports for the node
# (BULWARK_NODE_KUBECONFIG and the rest).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# Longest first (as measured on the test machine), so that the two streams end together.
PAIRED=(lifecycle schedule pitr backup switchover crash partition cluster restore drill restricted
	scale)
ALONE=(failover chaos)

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

# The executables by target name: they are run directly, since a `cargo test` holds the build
# directory's lock while its tests run, and the other stream would wait for it. The
# workspace's binaries, which the tests install, are built as `cargo test --workspace` builds
# them (with the same features: nothing is built twice after scripts/test.sh's first part).
cargo test --workspace --no-run --locked
cargo test -p bulwark-e2e --no-run --locked --message-format=json-render-diagnostics \
	>"$out/build.json"
python3 - "$out/build.json" >"$out/executables" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        kind = "test" if m["target"]["kind"] == ["test"] else "unit"
        print(m["target"]["name"], kind, m["executable"])
EOF

known=" ${PAIRED[*]} ${ALONE[*]} "
while read -r name kind _; do
	[[ "$kind" == unit || "$known" == *" $name "* ]] || {
		echo "scripts/e2e.sh: crates/e2e/tests/$name.rs is in no list: add it to PAIRED or ALONE" >&2
		exit 1
	}
done <"$out/executables"

# Runs one binary; its output is printed as one block once it ends (the other stream's lines
# never interleave with it). Exit status: the binary's.
run_one() {
	local name="$1" exe rc=0
	exe="$(awk -v n="$name" '$1 == n { print $3 }' "$out/executables")"
	[[ -n "$exe" ]] || {
		echo "scripts/e2e.sh: no test binary $name" >&2
		return 1
	}
	"$exe" >"$out/$name.log" 2>&1 || rc=$?
	# xargs would start no further binary after an exit status of 255.
	((rc != 255)) || rc=1
	{
		flock 9
		echo "     Running $name ($exe)"
		cat "$out/$name.log"
	} 9>"$out/.print"
	return "$rc"
}
export -f run_one
export out

status=0
for name in $(awk '$2 == "unit" { print $1 }' "$out/executables"); do
	run_one "$name" || status=1
done
printf '%s\n' "${PAIRED[@]}" | xargs -P 2 -I{} bash -c 'run_one "$1"' _ {} || status=1
for name in "${ALONE[@]}"; do
	run_one "$name" || status=1
done
exit "$status"
