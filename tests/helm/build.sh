#!/usr/bin/env bash
# Builds the helm CLI for Bulwark's chart tests and prints the directory holding the binary on
# stdout (everything else goes to stderr).
#
# The binary is cached outside the clone, keyed by the pinned version:
#   ${BULWARK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bulwark}/helm/<version>/bin/helm
# A cached build is reused as long as its stamp matches the wrapper module's inputs (go.mod,
# go.sum, versions.env), so a second run returns at once.
#
# Go dependencies come only from the Go module proxy (GOPROXY without a "direct" fallback),
# verified against the committed go.sum. The build runs under `nice` (BULWARK_BUILD_NICE,
# default 19) so it yields the CPU to other work on the machine.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"

log() { echo "helm/build.sh: $*" >&2; }

cache_root="${BULWARK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bulwark}"
dest="$cache_root/helm/${HELM_VERSION}"
bin="$dest/bin"

inputs_hash() {
	(
		cd "$here"
		find versions.env go.mod go.sum build.sh -type f -print0 | LC_ALL=C sort -z |
			xargs -0 sha256sum
		echo "go: $(go env GOVERSION)"
	) | sha256sum | cut -d' ' -f1
}

is_complete() {
	local stamp="$dest/stamp"
	[[ -f "$stamp" && "$(cat "$stamp")" == "$1" && -x "$bin/helm" ]]
}

if ! command -v go >/dev/null 2>&1; then
	log "the Go toolchain is required to build helm (go not found on PATH)"
	exit 1
fi

hash="$(inputs_hash)"
if is_complete "$hash"; then
	echo "$bin"
	exit 0
fi

mkdir -p "$dest"
# One build at a time per cache entry: concurrent test binaries wait for the first build.
exec 9>"$dest/.lock"
flock 9
if is_complete "$hash"; then
	echo "$bin"
	exit 0
fi

export GOPROXY="${BULWARK_GOPROXY:-https://proxy.golang.org}"
export GOFLAGS="-mod=readonly -buildvcs=false"
export GOTOOLCHAIN=local
export CGO_ENABLED=0

# The same version stamps as Helm's own Makefile: the release version, and the Kubernetes
# version `helm lint` / `helm template` assume (client-go v0.X.Y -> Kubernetes 1.X).
client_go="$(cd "$here" && go list -m -f '{{.Version}}' k8s.io/client-go)"
k8s_minor="${client_go#v0.}"
k8s_minor="${k8s_minor%%.*}"
ldflags="-s -w"
ldflags+=" -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
	ldflags+=" -X $pkg.k8sVersionMajor=1"
	ldflags+=" -X $pkg.k8sVersionMinor=${k8s_minor}"
done

staging="$dest/bin.partial"
rm -rf "$staging"
mkdir -p "$staging"
log "building helm ${HELM_VERSION} into $bin"
start=$SECONDS
(
	cd "$here"
	nice -n "${BULWARK_BUILD_NICE:-19}" go build -trimpath -ldflags "$ldflags" -o "$staging/helm" \
		helm.sh/helm/v3/cmd/helm
)
rm -rf "$bin"
mv "$staging" "$bin"
echo "$hash" >"$dest/stamp"
log "built in $((SECONDS - start))s"
echo "$bin"
