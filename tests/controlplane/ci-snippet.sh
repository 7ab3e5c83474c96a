#!/usr/bin/env bash
# Lines for .ci/run: build the test control plane (or reuse the cache outside the clone), then
# run the API and test-environment tests against it. Run from the repository root.
set -euo pipefail

BULWARK_CONTROLPLANE_BIN="$(bash tests/controlplane/build.sh)"
export BULWARK_CONTROLPLANE_BIN
cargo test -p bulwark-api -p bulwark-testenv
