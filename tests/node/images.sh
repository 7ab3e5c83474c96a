#!/usr/bin/env bash
# Builds the test node's container images locally, with no registry, as docker-archive tarballs
# cached outside the clone, and imports them into the node's containerd.
#
#   images.sh [build]         build (or reuse) the archives; prints their directory on stdout
#   images.sh import [SOCK]   build if needed, then import every archive into the containerd
#                             listening on SOCK (default: the running node's) in namespace k8s.io
#
# Images (names in lib.sh):
#   debian           Debian bookworm minbase (debootstrap) with updates applied, without docs
#   pause            scratch + the static pause binary of build.sh: the pods' sandbox image
#   mariadb          Debian's mariadb-server and mariadb-backup on the Debian image, arranged like
#                    the official image (mysql uid/gid 999, /var/lib/mysql, /run/mysqld,
#                    conf.d read last) with our own entrypoint (images/mariadb/)
#   mysqld-exporter  Debian's prometheus-mysqld-exporter 0.14 on the Debian image, behind a
#                    wrapper that accepts the 0.15+ flags (images/mysqld-exporter/)
#
# The Debian mirror is read at run time from the machine's apt sources (or BULWARK_DEBIAN_MIRROR)
# and is never written into the repository. Packages come only from that mirror; nothing is
# pulled from a container registry. Builds run in private mount and PID namespaces, so no mount
# and no process (say, a service started by a package's postinst) outlives them; buildah keeps
# its storage in a temporary directory under the cache, removed afterwards.
set -euo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SUITE=bookworm
# Bump to rebuild the Debian root filesystem when its recipe below changes.
ROOTFS_REVISION=1

log() { echo "node/images.sh: $*" >&2; }

# Runs a command quietly; shows its output only when it fails.
quiet() {
	local out
	if ! out="$("$@" 2>&1)"; then
		printf '%s\n' "$out" | tail -n 40 >&2
		log "failed: $*"
		return 1
	fi
}
die() {
	log "$*"
	exit 1
}

# Prints "URI SUITE" for each enabled Debian bookworm suite (bookworm, -updates, -security) with
# the main component in the machine's apt sources, one-line and deb822 formats alike.
debian_sources() {
	local files=()
	[[ -f /etc/apt/sources.list ]] && files+=(/etc/apt/sources.list)
	compgen -G '/etc/apt/sources.list.d/*.list' >/dev/null && files+=(/etc/apt/sources.list.d/*.list)
	local f
	for f in "${files[@]}"; do
		awk '$1 == "deb" {
			i = 2
			if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
			uri = $i; suite = $(i + 1); main = 0
			for (j = i + 2; j <= NF; j++) if ($j == "main") main = 1
			if (main) print uri, suite
		}' "$f"
	done
	if compgen -G '/etc/apt/sources.list.d/*.sources' >/dev/null; then
		awk -v RS= -F '\n' '{
			types = uris = suites = comps = ""; enabled = 1
			for (i = 1; i <= NF; i++) {
				if ($i ~ /^#/) continue
				split($i, kv, ":"); key = tolower(kv[1]); val = substr($i, length(kv[1]) + 2)
				if (key == "types") types = val
				else if (key == "uris") uris = val
				else if (key == "suites") suites = val
				else if (key == "components") comps = val
				else if (key == "enabled" && val ~ /no/) enabled = 0
			}
			if (!enabled || types !~ /(^|[ \t])deb([ \t]|$)/ || comps !~ /(^|[ \t])main([ \t]|$)/) next
			nu = split(uris, u, /[ \t]+/); ns = split(suites, s, /[ \t]+/)
			for (a = 1; a <= nu; a++) for (b = 1; b <= ns; b++) if (u[a] != "" && s[b] != "") print u[a], s[b]
		}' /etc/apt/sources.list.d/*.sources
	fi | awk -v suite="$SUITE" '$2 == suite || $2 == suite "-updates" || $2 == suite "-security"' |
		sed 's|/*[[:space:]]| |' | LC_ALL=C sort -u -k2,2
}

# The apt sources of the images: the mirror for the suite, plus updates and security when the
# machine has them.
image_sources() {
	if [[ -n "${BULWARK_DEBIAN_MIRROR:-}" ]]; then
		echo "${BULWARK_DEBIAN_MIRROR%/} $SUITE"
		debian_sources | awk -v s="$SUITE" '$2 != s'
	else
		debian_sources
	fi
}

# Runs a command chrooted into $1 in private mount and PID namespaces, with /proc and /dev, so
# that mounts vanish and processes die with it. A policy-rc.d keeps services from starting.
in_root() {
	local root="$1"
	shift
	# shellcheck disable=SC2016 # expanded by the inner shell
	unshare --mount --pid --fork --propagation private -- /bin/sh -c '
		root="$1"; shift
		mount -t proc proc "$root/proc"
		mount --rbind /dev "$root/dev"
		exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
			DEBIAN_FRONTEND=noninteractive LC_ALL=C "$@"' sh "$root" "$@"
}

# Prepares a root for apt: sources, the host's resolver, no services, no docs.
root_apt_begin() {
	local root="$1"
	image_sources | awk '{ print "deb " $1 " " $2 " main" }' >"$root/etc/apt/sources.list"
	cp /etc/resolv.conf "$root/etc/resolv.conf"
	printf '#!/bin/sh\n# No service starts while the image is built.\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
	chmod 755 "$root/usr/sbin/policy-rc.d"
	cat >"$root/etc/dpkg/dpkg.cfg.d/bulwark-slim" <<-'CFG'
		# Test images carry no documentation (copyrights stay).
		path-exclude=/usr/share/doc/*
		path-include=/usr/share/doc/*/copyright
		path-exclude=/usr/share/man/*
		path-exclude=/usr/share/info/*
		path-exclude=/usr/share/locale/*
		path-exclude=/usr/share/lintian/*
	CFG
	printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\nAcquire::Languages "none";\n' \
		>"$root/etc/apt/apt.conf.d/90bulwark"
}

# Undoes root_apt_begin's temporary parts and drops caches, logs and the host's identity.
root_apt_end() {
	local root="$1"
	quiet in_root "$root" apt-get clean
	rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
		"$root"/var/log/apt/* "$root"/var/log/dpkg.log "$root"/var/log/alternatives.log \
		"$root"/usr/share/doc/*/[!c]* "$root"/usr/share/man/* "$root"/usr/share/info/* \
		"$root"/usr/share/locale/* "$root"/tmp/* "$root"/var/tmp/* \
		"$root/usr/sbin/policy-rc.d" "$root/etc/resolv.conf" "$root/etc/hostname"
	find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
}

# Builds the Debian root filesystem tarball $1.
build_rootfs() {
	local out="$1" work mirror
	mirror="$(image_sources | awk -v s="$SUITE" '$2 == s { print $1; exit }')"
	[[ -n "$mirror" ]] || die "no Debian $SUITE source in the apt sources; set BULWARK_DEBIAN_MIRROR"
	work="$(mktemp -d "$IMAGES_CACHE/.rootfs.XXXXXX")"
	# shellcheck disable=SC2064 # expand now: the trap must remove this directory
	trap "rm -rf '$work'; trap - RETURN" RETURN
	log "debootstrap --variant=minbase $SUITE from the machine's mirror (about a minute)"
	if ! unshare --mount --pid --fork --propagation private -- \
		debootstrap --variant=minbase "$SUITE" "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1; then
		tail -n 30 "$work/debootstrap.log" >&2
		die "debootstrap failed"
	fi
	root_apt_begin "$work/root"
	quiet in_root "$work/root" apt-get update
	quiet in_root "$work/root" apt-get -y upgrade
	root_apt_end "$work/root"
	rm -rf "${work:?}"/root/dev/* "${work:?}"/root/proc/* "${work:?}"/root/sys/* "${work:?}"/root/run/*
	tar --numeric-owner --xattrs -C "$work/root" -cf "$out.partial" .
	mv "$out.partial" "$out"
}

# buildah with its storage in the build's temporary directory. Whatever --root says, buildah
# keeps a blob-info cache under /var/lib/containers: it gets a private tmpfs over /var/lib, so
# the host's is never written.
bah() {
	# shellcheck disable=SC2016 # expanded by the inner shell
	unshare --mount --propagation private -- /bin/sh -c \
		'mount -t tmpfs -o size=16m,mode=0755 bulwark-buildah /var/lib && exec "$@"' sh \
		buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs "$@"
}

# Builds the four images from the rootfs tarball $1 into the directory $2.
build_images() {
	local rootfs="$1" out="$2" bin c mnt
	bin="$("$node_dir/build.sh")"

	log "debian image"
	c="$(bah from scratch)"
	mnt="$(bah mount "$c")"
	tar --numeric-owner --xattrs -C "$mnt" -xf "$rootfs"
	bah umount "$c" >/dev/null
	bah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		--env LANG=C.UTF-8 "$c"
	bah commit --quiet --rm "$c" "$BASE_IMAGE" >/dev/null

	log "pause image"
	c="$(bah from scratch)"
	bah copy --quiet "$c" "$bin/pause" /pause
	bah config --entrypoint '["/pause"]' --user 65535:65535 "$c"
	bah commit --quiet --rm "$c" "$PAUSE_IMAGE" >/dev/null

	log "mariadb image (Debian's mariadb-server)"
	c="$(bah from "$BASE_IMAGE")"
	mnt="$(bah mount "$c")"
	root_apt_begin "$mnt"
	# The official image's user (uid/gid 999), created before the packages so they use it, and
	# its trick to keep the postinst from initialising a datadir.
	in_root "$mnt" groupadd --system --gid 999 mysql
	in_root "$mnt" useradd --system --uid 999 --gid mysql --home-dir /var/lib/mysql \
		--shell /usr/sbin/nologin mysql
	mkdir -p "$mnt/var/lib/mysql/mysql"
	touch "$mnt/var/lib/mysql/mysql/user.frm"
	quiet in_root "$mnt" apt-get update
	quiet in_root "$mnt" apt-get -y install mariadb-server mariadb-backup
	root_apt_end "$mnt"
	rm -rf "$mnt/var/lib/mysql" "$mnt/etc/mysql/mariadb.conf.d/50-mysqld_safe.cnf"
	mkdir -p "$mnt/var/lib/mysql" "$mnt/run/mysqld" "$mnt/docker-entrypoint-initdb.d"
	chown 999:999 "$mnt/var/lib/mysql" "$mnt/run/mysqld"
	chmod 1777 "$mnt/run/mysqld"
	# As the official image: listen on all addresses, log to stderr, no user= line, no reverse
	# lookups; and read /etc/mysql/conf.d (where deployments put their options) last.
	grep -rlZE '^(bind-address|log|user\s)' "$mnt/etc/mysql" --include='*.cnf' |
		xargs -r0 sed -Ei 's/^(bind-address|log|user\s)/#&/'
	printf '[mariadb]\nhost-cache-size=0\nskip-name-resolve\n' \
		>"$mnt/etc/mysql/mariadb.conf.d/05-skipcache.cnf"
	sed -i -e '/includedir/ {N;s/\(.*\)\n\(.*\)/\n\2\n\1/}' "$mnt/etc/mysql/mariadb.cnf"
	install -m 755 "$node_dir/images/mariadb/docker-entrypoint.sh" "$mnt/usr/local/bin/"
	bah umount "$c" >/dev/null
	bah config --entrypoint '["docker-entrypoint.sh"]' --cmd '["mariadbd"]' --port 3306/tcp \
		--volume /var/lib/mysql --env LANG=C.UTF-8 "$c"
	bah commit --quiet --rm "$c" "$MARIADB_IMAGE" >/dev/null

	log "mysqld-exporter image (Debian's prometheus-mysqld-exporter)"
	c="$(bah from "$BASE_IMAGE")"
	mnt="$(bah mount "$c")"
	root_apt_begin "$mnt"
	quiet in_root "$mnt" apt-get update
	quiet in_root "$mnt" apt-get -y install prometheus-mysqld-exporter
	root_apt_end "$mnt"
	install -m 755 "$node_dir/images/mysqld-exporter/mysqld_exporter" "$mnt/usr/local/bin/"
	bah umount "$c" >/dev/null
	bah config --entrypoint '["/usr/local/bin/mysqld_exporter"]' --cmd '[]' --user nobody \
		--port 9104/tcp "$c"
	bah commit --quiet --rm "$c" "$EXPORTER_IMAGE" >/dev/null

	local name image
	for name in debian pause mariadb mysqld-exporter; do
		case "$name" in
		debian) image="$BASE_IMAGE" ;;
		pause) image="$PAUSE_IMAGE" ;;
		mariadb) image="$MARIADB_IMAGE" ;;
		mysqld-exporter) image="$EXPORTER_IMAGE" ;;
		esac
		bah push --quiet "$image" "docker-archive:$out/$name.tar:$image"
	done
}

# Prints the directory of the image archives, building what is missing.
build() {
	if ! command -v buildah >/dev/null || ! command -v debootstrap >/dev/null; then
		die "buildah and debootstrap are required: run tests/node/install-deps.sh as root"
	fi
	[[ $(id -u) -eq 0 ]] || die "building the images needs root (debootstrap, chroot)"
	mkdir -p "$IMAGES_CACHE"
	local sources rootfs_key rootfs key dir
	sources="$(image_sources)"
	[[ -n "$sources" ]] || die "no Debian $SUITE source in the apt sources; set BULWARK_DEBIAN_MIRROR"
	rootfs_key="$(printf '%s\n' "$SUITE" "$ROOTFS_REVISION" "$sources" | sha256sum | cut -c1-16)"
	rootfs="$IMAGES_CACHE/rootfs-$SUITE-$rootfs_key.tar"
	exec 8>"$IMAGES_CACHE/.lock"
	flock 8
	local start=$SECONDS
	if [[ ! -f "$rootfs" ]]; then
		build_rootfs "$rootfs"
		log "root filesystem built in $((SECONDS - start))s"
	fi
	key="$(
		{
			echo "$rootfs_key"
			sha256sum "$node_dir/images.sh" "$node_dir/lib.sh" "$("$node_dir/build.sh")/pause"
			find "$node_dir/images" -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
		} | sed "s|$node_dir/||" | sha256sum | cut -c1-16
	)"
	dir="$IMAGES_CACHE/$key"
	if [[ -f "$dir/stamp" ]]; then
		echo "$dir"
		return
	fi
	case "$IMAGES_CACHE/" in
	/var/lib/*) die "the image cache cannot be under /var/lib (buildah runs with a tmpfs there)" ;;
	esac
	work="$(mktemp -d "$IMAGES_CACHE/.build.XXXXXX")"
	trap 'bah rm --all >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
	mkdir -p "$work/tmp" "$work/out"
	export TMPDIR="$work/tmp"
	build_images "$rootfs" "$work/out"
	rm -rf "$dir"
	echo "$key" >"$work/out/stamp"
	mv "$work/out" "$dir"
	# Older builds are not needed any more.
	find "$IMAGES_CACHE" -mindepth 1 -maxdepth 1 -type d ! -name "$key" ! -name '.*' -exec rm -rf {} +
	log "images built in $((SECONDS - start))s: $(du -sh "$dir" | cut -f1) in $dir"
	echo "$dir"
}

# Imports every archive into containerd's k8s.io namespace (the CRI's), once per node: a marker
# in the node's state directory remembers which build was imported.
import() {
	local sock="${1:-$NODE_STATE/containerd/containerd.sock}" dir key marker f
	[[ -S "$sock" ]] || die "no containerd socket at $sock (is the node up?)"
	dir="$(build)"
	key="$(cat "$dir/stamp")"
	marker="$(dirname "$sock")/images-imported"
	if [[ "$(cat "$marker" 2>/dev/null)" == "$key" ]]; then
		return
	fi
	# Unpacked lazily, when a container first uses an image: a third faster, and images no pod
	# uses are never unpacked.
	for f in "$dir"/*.tar; do
		ctr -a "$sock" -n k8s.io images import --no-unpack "$f" >/dev/null
	done
	echo "$key" >"$marker"
}

case "${1:-build}" in
build) build ;;
import) import "${2:-}" ;;
*) die "usage: $0 [build | import [CONTAINERD_SOCKET]]" ;;
esac
