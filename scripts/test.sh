#!/usr/bin/env bash
# Every test: installs what the tests need (Debian MariaDB, moto; as root), builds the test
# control plane once into a cache outside the clone, checks formatting and lints, and runs the
# whole workspace's tests against real MariaDB, a real S3 server and a real API server.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [[ $(id -u) -eq 0 ]]; then
  bash scripts/install-test-deps.sh
else
  echo "[test] not root: assuming scripts/install-test-deps.sh has been run" >&2
fi
BULWARK_CONTROLPLANE_BIN="$(bash tests/controlplane/build.sh)"
export BULWARK_CONTROLPLANE_BIN
# helm for the chart tests (crates/operator/tests/chart.rs), built the same way (~2.5 min once).
BULWARK_HELM_BIN="$(bash tests/helm/build.sh)"
export BULWARK_HELM_BIN

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# Every test binary runs to the end (--no-fail-fast), so one failure does not hide others;
# cargo's output is kept, then one summary line closes the run over every binary, and the
# script exits non-zero when anything failed.
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log" || status=$?
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "summary: %d passed, %d failed\n", p, f; if (p == 0) exit 1 }' "$log" || status=1
exit "$status"
