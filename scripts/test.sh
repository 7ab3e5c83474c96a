#!/usr/bin/env bash
# Every test: installs what the tests need (Debian MariaDB, moto, the node's containerd, runc,
# CNI plugins, buildah, debootstrap; as root), builds the test control plane, helm and the
# node's Kubernetes parts once into a cache outside the clone, checks formatting and lints, runs
# the whole workspace's tests against real MariaDB, a real S3 server and a real API server, and
# brings a real Kubernetes node up in its own network namespace to run pods on it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [[ $(id -u) -eq 0 ]]; then
  bash scripts/install-test-deps.sh
  bash tests/node/install-deps.sh
else
  echo "[test] not root: assuming scripts/install-test-deps.sh has been run" >&2
fi
BULWARK_CONTROLPLANE_BIN="$(bash tests/controlplane/build.sh)"
export BULWARK_CONTROLPLANE_BIN
# helm for the chart tests (crates/operator/tests/chart.rs), built the same way (~2.5 min once).
BULWARK_HELM_BIN="$(bash tests/helm/build.sh)"
export BULWARK_HELM_BIN
# promtool for the alert rule tests (crates/operator/tests/alerts.rs), from the Go module proxy
# (~4 min once).
BULWARK_PROMTOOL_BIN="$(bash tests/promtool/build.sh)"
export BULWARK_PROMTOOL_BIN

# A one-off build of the whole workspace gains nothing from incremental state, which would
# double the target directory; a developer's own setting wins.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
bash scripts/disk-preflight.sh "$ROOT"

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# Every test binary runs to the end (--no-fail-fast), so one failure does not hide others;
# cargo's output is kept, then one summary line closes the run over every binary, and the
# script exits non-zero when anything failed.
log="$(mktemp)"
# The figures the end-to-end tests measured (pauses, times to promotion, rows acknowledged and
# lost), shown before the summary: the test harness hides what passing tests print.
figures="$(mktemp)"
export BULWARK_E2E_FIGURES="$figures"
trap 'rm -f "$log" "$figures"' EXIT
status=0

# The real node (tests/node). First its own smoke test: up in its own network namespace, pods
# from images built here (Services, DNS, volumes, MariaDB, no route out), down again leaving the
# host as it was; counted as one test in the summary. Then up once more for the end-to-end
# tests of crates/e2e (the operator installed from the chart, its clusters as real pods), and
# down when the run ends, whatever happens.
node_passed=0 node_failed=0
if [[ $(id -u) -eq 0 ]]; then
  if bash tests/node/smoke.sh 2>&1 | tee -a "$log"; then
    node_passed=1
  else
    node_failed=1
    status=1
  fi
  trap 'bash tests/node/node.sh down >&2 || true; rm -f "$log" "$figures"' EXIT
  # Three nodes: members spread over them, and the chaos cases (crates/e2e/tests/chaos.rs)
  # stop a node or cut traffic between nodes for real.
  if BULWARK_NODE_COUNT="${BULWARK_NODE_COUNT:-3}" bash tests/node/node.sh up; then
    node_env="$(bash tests/node/node.sh env)"
    BULWARK_NODE_KUBECONFIG="$(sed -n 's/^export KUBECONFIG=//p' <<<"$node_env")"
    BULWARK_NODE_BIN="$(sed -n 's/^export BULWARK_NODE_BIN=//p' <<<"$node_env")"
    BULWARK_NODE_NETNS="$(sed -n 's/^export BULWARK_NODE_NETNS=//p' <<<"$node_env")"
    BULWARK_NODE_IP="$(sed -n 's/^export BULWARK_NODE_IP=//p' <<<"$node_env")"
    BULWARK_NODE_COUNT="$(sed -n 's/^export BULWARK_NODE_COUNT=//p' <<<"$node_env")"
    export BULWARK_NODE_KUBECONFIG BULWARK_NODE_BIN BULWARK_NODE_NETNS BULWARK_NODE_IP BULWARK_NODE_COUNT
  else
    echo "[test] the node did not come up; the end-to-end tests will fail" >&2
    status=1
  fi
else
  echo "[test] not root: the real-node tests need root and were not run" >&2
  node_failed=1
  status=1
fi

# Everything but the end-to-end tests first, alone: their real servers' timing is their own.
cargo test --workspace --exclude bulwark-e2e --locked --no-fail-fast 2>&1 | tee -a "$log" || status=$?
# Then the end-to-end tests on the node, two binaries at a time and the chaos cases alone.
bash scripts/e2e.sh 2>&1 | tee -a "$log" || status=$?
if [[ $(id -u) -eq 0 ]]; then
  # Down before the summary, so that the summary stays the last line.
  bash tests/node/node.sh down >&2 || status=1
  trap 'rm -f "$log" "$figures"' EXIT
fi
if [[ -s "$figures" ]]; then
  echo "figures of the end-to-end tests:"
  sort -s -t: -k1,1 "$figures"
fi

# What failed, again at the end: the harness prints it next to its binary's output, which a
# long log's tail (all a CI record may keep) does not reach.
if grep -q -E '^test .* \.\.\. FAILED$' "$log"; then
  echo "failed tests:"
  grep -E '^test .* \.\.\. FAILED$' "$log" | sed 's/^test /  /; s/ \.\.\. FAILED$//'
  echo "their first lines of output:"
  awk '/^---- .* stdout ----$/ { on = 1; n = 0; print; next }
       /^failures:$/ || /^test result:/ { on = 0 }
       on && n < 25 { print "  " $0; n++ }' "$log"
fi

awk -v np="$node_passed" -v nf="$node_failed" \
  '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
   END { p += np; f += nf; printf "summary: %d passed, %d failed\n", p, f; if (p == 0) exit 1 }' "$log" || status=1
exit "$status"
