#!/usr/bin/env bash
# Builds promtool (Prometheus's rule checker and rule unit-test runner) for the chart's alert
# rule tests and prints the directory holding the binary on stdout (everything else goes to
# stderr).
#
# The binary is cached outside the clone, keyed by the pinned version:
#   ${BULWARK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bulwark}/promtool/<version>/bin/promtool
# `go install module@version` builds it from the Go module proxy with the dependencies
# Prometheus's own go.sum pins. A first build takes several minutes (it compiles Prometheus's
# service discovery); it runs under `nice` (BULWARK_BUILD_NICE, default 19).
set -euo pipefail

# Prometheus 3.x is tagged v0.3xx.y for Go modules.
PROMTOOL_VERSION="${BULWARK_PROMTOOL_VERSION:-v0.316.0}"

log() { echo "promtool/build.sh: $*" >&2; }

cache_root="${BULWARK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bulwark}"
dest="$cache_root/promtool/${PROMTOOL_VERSION}"
bin="$dest/bin"

if ! command -v go >/dev/null 2>&1; then
	log "the Go toolchain is required to build promtool (go not found on PATH)"
	exit 1
fi
stamp="go: $(go env GOVERSION)"
is_complete() { [[ -f "$dest/stamp" && "$(cat "$dest/stamp")" == "$stamp" && -x "$bin/promtool" ]]; }
if is_complete; then
	echo "$bin"
	exit 0
fi

mkdir -p "$dest"
# One build at a time per cache entry: concurrent test binaries wait for the first build.
exec 9>"$dest/.lock"
flock 9
if is_complete; then
	echo "$bin"
	exit 0
fi

export GOPROXY="${BULWARK_GOPROXY:-https://proxy.golang.org}"
export GOFLAGS="-buildvcs=false"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
staging="$dest/bin.partial"
rm -rf "$staging"
mkdir -p "$staging"
log "building promtool ${PROMTOOL_VERSION} into $bin"
start=$SECONDS
GOBIN="$staging" nice -n "${BULWARK_BUILD_NICE:-19}" \
	go install -ldflags "-s -w" "github.com/prometheus/prometheus/cmd/promtool@${PROMTOOL_VERSION}"
rm -rf "$bin"
mv "$staging" "$bin"
echo "$stamp" >"$dest/stamp"
log "built in $((SECONDS - start))s"
echo "$bin"
