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

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
