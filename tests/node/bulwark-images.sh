#!/usr/bin/env bash
# Builds Bulwark's own images from the project's Dockerfile and Dockerfile.backup with buildah,
# from binaries already built (say, by `cargo build`), as docker-archive tarballs cached outside
# the clone, and imports them into the test node's containerd.
#
#   bulwark-images.sh [build] BINDIR          build (or reuse) the archives; prints their directory
#   bulwark-images.sh import BINDIR [SOCK]    build if needed, then import them into the containerd
#                                             listening on SOCK (default: the running node's)
#
# BINDIR holds mysql-operator, mysql-backup and bulwark-agent (e.g. target/debug). Their debug
# information is stripped into a temporary build context (bin/), and the images are built with
#   --build-arg BINARIES=prebuilt                       the binaries of the context, no cargo
#   --build-arg BASE_IMAGE=bulwark.local/debian:bookworm  images.sh's Debian (no registry)
#   --build-arg PERCONA=false                           (backup image) MariaDB's tools only
# and tagged (override with the environment):
#   BULWARK_OPERATOR_IMAGE  bulwark.local/mysql-operator:dev
#   BULWARK_BACKUP_IMAGE    bulwark.local/mysql-backup:dev
#
# Network: nothing is pulled from a container registry (`--pull=never`; the base comes from
# images.sh's archive). The operator image is built with `--network none`. The backup image's
# one networked step is Dockerfile.backup's `apt-get update && apt-get install mariadb-backup
# mariadb-client`, which reaches the Debian mirror written into the base image's
# /etc/apt/sources.list by images.sh (read from the machine's apt sources): that build runs with
# `--network host` because buildah's other network modes would create a bridge and firewall
# rules on the host. With PERCONA=false no other RUN step touches the network.
#
# Storage: buildah keeps its store in a temporary directory under the cache (vfs driver), with a
# private tmpfs over /var/lib, as images.sh does; the directory is removed afterwards.
# Cache key: the stripped binaries' hashes, both Dockerfiles, this script and the base image's
# build key. An unchanged build is skipped; a node imports a build once.
set -euo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OPERATOR_IMAGE="${BULWARK_OPERATOR_IMAGE:-bulwark.local/mysql-operator:dev}"
BACKUP_IMAGE="${BULWARK_BACKUP_IMAGE:-bulwark.local/mysql-backup:dev}"
BULWARK_IMAGES_CACHE="$cache_root/node/bulwark-images"
repo_dir="$(cd "$node_dir/../.." && pwd)"
BINARIES=(mysql-operator mysql-backup bulwark-agent)

log() { echo "node/bulwark-images.sh: $*" >&2; }
die() {
	log "$*"
	exit 1
}

# buildah with its storage in the build's temporary directory and a private tmpfs over /var/lib
# (buildah keeps a blob-info cache there whatever --root says).
bah() {
	# shellcheck disable=SC2016 # expanded by the inner shell
	unshare --mount --propagation private -- /bin/sh -c \
		'mount -t tmpfs -o size=16m,mode=0755 bulwark-buildah /var/lib && exec "$@"' sh \
		buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs "$@"
}

# Runs a command quietly; shows the end of its output when it fails.
quiet() {
	local out
	if ! out="$("$@" 2>&1)"; then
		printf '%s\n' "$out" | tail -n 60 >&2
		log "failed: $*"
		return 1
	fi
}

# Copies the binaries of $1 without their debug information into $2/bin.
strip_binaries() {
	local from="$1" ctx="$2" b
	mkdir -p "$ctx/bin"
	for b in "${BINARIES[@]}"; do
		[[ -x "$from/$b" ]] || die "no executable $from/$b"
		strip --strip-debug -o "$ctx/bin/$b" "$from/$b"
		chmod 0755 "$ctx/bin/$b"
	done
}

build() {
	local bindir="${1:-}"
	[[ -n "$bindir" ]] || die "usage: $0 [build | import] BINDIR"
	bindir="$(cd "$bindir" && pwd)"
	command -v buildah >/dev/null || die "buildah is required: run tests/node/install-deps.sh as root"
	[[ $(id -u) -eq 0 ]] || die "building the images needs root (buildah with a private /var/lib)"
	case "$BULWARK_IMAGES_CACHE/" in
	/var/lib/*) die "the image cache cannot be under /var/lib (buildah runs with a tmpfs there)" ;;
	esac
	local base_dir start=$SECONDS key dir
	base_dir="$("$node_dir/images.sh" build)"
	mkdir -p "$BULWARK_IMAGES_CACHE"
	exec 9>"$BULWARK_IMAGES_CACHE/.lock"
	flock 9

	work="$(mktemp -d "$BULWARK_IMAGES_CACHE/.build.XXXXXX")"
	trap 'bah rm --all >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
	mkdir -p "$work/tmp" "$work/out" "$work/context"
	strip_binaries "$bindir" "$work/context"
	key="$(
		{
			cat "$base_dir/stamp"
			echo "$OPERATOR_IMAGE $BACKUP_IMAGE"
			sha256sum "$repo_dir/Dockerfile" "$repo_dir/Dockerfile.backup" "$node_dir/bulwark-images.sh"
			(cd "$work/context" && sha256sum bin/*)
		} | sed "s|$repo_dir/||" | sha256sum | cut -c1-16
	)"
	dir="$BULWARK_IMAGES_CACHE/$key"
	if [[ -f "$dir/stamp" ]]; then
		log "unchanged: $dir"
		echo "$dir"
		return
	fi
	export TMPDIR="$work/tmp"

	log "loading the base image $BASE_IMAGE"
	quiet bah pull --quiet "docker-archive:$base_dir/debian.tar"
	# Docker format: buildah ignores SHELL (Dockerfile.backup's bash with pipefail) in OCI images.
	local args=(--pull=never --layers=false --format docker --build-arg BINARIES=prebuilt
		--build-arg "BASE_IMAGE=$BASE_IMAGE")
	local t=$SECONDS
	log "$OPERATOR_IMAGE from Dockerfile"
	quiet bah bud "${args[@]}" --network none -f "$repo_dir/Dockerfile" -t "$OPERATOR_IMAGE" \
		"$work/context"
	log "  built in $((SECONDS - t))s"
	t=$SECONDS
	log "$BACKUP_IMAGE from Dockerfile.backup (apt-get from the base image's Debian mirror)"
	quiet bah bud "${args[@]}" --build-arg PERCONA=false --network host \
		-f "$repo_dir/Dockerfile.backup" -t "$BACKUP_IMAGE" "$work/context"
	log "  built in $((SECONDS - t))s"
	bah push --quiet "$OPERATOR_IMAGE" "docker-archive:$work/out/mysql-operator.tar:$OPERATOR_IMAGE"
	bah push --quiet "$BACKUP_IMAGE" "docker-archive:$work/out/mysql-backup.tar:$BACKUP_IMAGE"
	printf '%s=%s\n' operator "$OPERATOR_IMAGE" backup "$BACKUP_IMAGE" >"$work/out/images"
	echo "$key" >"$work/out/stamp"
	rm -rf "$dir"
	mv "$work/out" "$dir"
	# Keep the two newest builds (switching between two trees stays cheap).
	find "$BULWARK_IMAGES_CACHE" -mindepth 1 -maxdepth 1 -type d ! -name '.*' -printf '%T@ %p\n' |
		sort -rn | tail -n +3 | cut -d' ' -f2- | xargs -r rm -rf
	log "images built in $((SECONDS - start))s: $(du -sh "$dir" | cut -f1) in $dir"
	echo "$dir"
}

# Imports both archives into containerd's k8s.io namespace, once per build and node.
import() {
	local bindir="${1:-}" sock="${2:-$NODE_STATE/containerd/containerd.sock}" dir key marker f
	[[ -S "$sock" ]] || die "no containerd socket at $sock (is the node up?)"
	dir="$(build "$bindir")"
	key="$(cat "$dir/stamp")"
	marker="$(dirname "$sock")/bulwark-images-imported"
	if [[ "$(cat "$marker" 2>/dev/null)" == "$key" ]]; then
		return
	fi
	for f in "$dir"/*.tar; do
		ctr -a "$sock" -n k8s.io images import --no-unpack "$f" >/dev/null
	done
	echo "$key" >"$marker"
}

case "${1:-}" in
build) build "${2:-}" ;;
import) import "${2:-}" "${3:-}" ;;
"" | -h | --help) die "usage: $0 [build | import] BINDIR [CONTAINERD_SOCKET]" ;;
*) build "$1" ;;
esac
