#!/usr/bin/env bash
# Builds the test node's binaries and prints the directory holding them on stdout (everything
# else goes to stderr): kubelet, kube-scheduler, kube-proxy, kubectl (k8s.io/kubernetes, the
# control plane's release), coredns, local-path-provisioner, and a static "pause" for the pod
# sandbox image. etcd, kube-apiserver and kube-controller-manager come from
# ../controlplane/build.sh.
#
# The binaries are cached outside the clone, keyed by the pinned versions:
#   ${BULWARK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bulwark}/node/<k8s>-<coredns>-<lpp>/bin
# A cached build is reused as long as its stamp matches the wrapper modules' inputs (go.mod,
# go.sum, the Go sources, versions.env, the Go version), so a second run returns at once.
#
# Go dependencies come only from the Go module proxy (GOPROXY without a "direct" fallback),
# verified against the committed go.sum files. The build runs under `nice` (BULWARK_BUILD_NICE,
# default 19) so it yields the CPU to other work on the machine.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"

log() { echo "node/build.sh: $*" >&2; }

cache_root="${BULWARK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bulwark}"
dest="$cache_root/node/${K8S_VERSION}-coredns${COREDNS_VERSION}-lpp${LOCAL_PATH_PROVISIONER_VERSION}"
bin="$dest/bin"
binaries=(kubelet kube-scheduler kube-proxy kubectl pause coredns local-path-provisioner)

inputs_hash() {
	(
		cd "$here"
		find versions.env go.mod go.sum cmd coredns local-path-provisioner -type f -print0 |
			LC_ALL=C sort -z | xargs -0 sha256sum
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
	log "the Go toolchain is required to build the test node (go not found on PATH)"
	exit 1
fi

hash="$(inputs_hash)"
if is_complete "$hash"; then
	echo "$bin"
	exit 0
fi

mkdir -p "$dest"
# One build at a time per cache entry: concurrent callers wait for the first build.
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

# Same version stamping as the control plane, so `kubectl version` and the node report the release.
k8s_minor="${K8S_VERSION#v1.}"
k8s_minor="${k8s_minor%%.*}"
build_date="$(cd "$here" && go list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)"
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	k8s_ldflags+=" -X '$pkg.gitVersion=${K8S_VERSION}'"
	k8s_ldflags+=" -X '$pkg.gitMajor=1'"
	k8s_ldflags+=" -X '$pkg.gitMinor=${k8s_minor}'"
	k8s_ldflags+=" -X '$pkg.gitTreeState=clean'"
	k8s_ldflags+=" -X '$pkg.buildDate=${build_date}'"
done

gobuild() {
	local dir="$1"
	shift
	(cd "$here/$dir" && nice -n "${BULWARK_BUILD_NICE:-19}" go build -trimpath "$@")
}

staging="$dest/bin.partial"
rm -rf "$staging"
mkdir -p "$staging"
log "building kubernetes ${K8S_VERSION} node binaries, coredns ${COREDNS_VERSION} and" \
	"local-path-provisioner ${LOCAL_PATH_PROVISIONER_VERSION} into $bin (this takes a while)"
start=$SECONDS
gobuild . -ldflags "$k8s_ldflags" -o "$staging/" \
	./cmd/kubelet ./cmd/kube-scheduler ./cmd/kube-proxy ./cmd/kubectl ./cmd/pause
log "kubernetes binaries built after $((SECONDS - start))s"
gobuild coredns -ldflags "-s -w" -o "$staging/coredns" .
log "coredns built after $((SECONDS - start))s"
gobuild local-path-provisioner \
	-ldflags "-s -w -X 'main.VERSION=${LOCAL_PATH_PROVISIONER_VERSION}'" \
	-o "$staging/local-path-provisioner" github.com/rancher/local-path-provisioner
rm -rf "$bin"
mv "$staging" "$bin"
echo "$hash" >"$dest/stamp"
log "built in $((SECONDS - start))s"
echo "$bin"
