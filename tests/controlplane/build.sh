#!/usr/bin/env bash
# Builds etcd, kube-apiserver and kube-controller-manager for Bulwark's tests and prints the
# directory holding the binaries on stdout (everything else goes to stderr).
#
# The binaries are cached outside the clone, keyed by the pinned versions:
#   ${BULWARK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bulwark}/controlplane/<k8s>-<etcd>/bin
# A cached build is reused as long as its stamp matches the wrapper module's inputs (go.mod,
# go.sum, cmd/, versions.env), so a second run returns at once.
#
# Go dependencies come only from the Go module proxy (GOPROXY without a "direct" fallback),
# verified against the committed go.sum. The build runs under `nice` (BULWARK_BUILD_NICE,
# default 19) so it yields the CPU to other work on the machine.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"

log() { echo "controlplane/build.sh: $*" >&2; }

cache_root="${BULWARK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bulwark}"
dest="$cache_root/controlplane/${K8S_VERSION}-${ETCD_VERSION}"
bin="$dest/bin"
binaries=(etcd kube-apiserver kube-controller-manager)

inputs_hash() {
	(
		cd "$here"
		find versions.env go.mod go.sum cmd -type f -print0 | LC_ALL=C sort -z |
			xargs -0 sha256sum
		echo "go: $(go env GOVERSION)"
	) | sha256sum | cut -d' ' -f1
}

is_complete() {
	local stamp="$dest/stamp"
	[[ -f "$stamp" && "$(cat "$stamp")" == "$1" ]] || return 1
	local b
	for b in "${binaries[@]}"; do
		[[ -x "$bin/$b" ]] || return 1
	done
}

if ! command -v go >/dev/null 2>&1; then
	log "the Go toolchain is required to build the control plane (go not found on PATH)"
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

k8s_minor="${K8S_VERSION#v1.}"
k8s_minor="${k8s_minor%%.*}"
build_date="$(cd "$here" && go list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X '$pkg.gitVersion=${K8S_VERSION}'"
	ldflags+=" -X '$pkg.gitMajor=1'"
	ldflags+=" -X '$pkg.gitMinor=${k8s_minor}'"
	ldflags+=" -X '$pkg.gitTreeState=clean'"
	ldflags+=" -X '$pkg.buildDate=${build_date}'"
done

staging="$dest/bin.partial"
rm -rf "$staging"
mkdir -p "$staging"
log "building kubernetes ${K8S_VERSION} and etcd ${ETCD_VERSION} into $bin (this takes a while)"
start=$SECONDS
(
	cd "$here"
	nice -n "${BULWARK_BUILD_NICE:-19}" go build -trimpath -ldflags "$ldflags" -o "$staging/" \
		./cmd/etcd ./cmd/kube-apiserver ./cmd/kube-controller-manager
)
rm -rf "$bin"
mv "$staging" "$bin"
echo "$hash" >"$dest/stamp"
log "built in $((SECONDS - start))s"
echo "$bin"
