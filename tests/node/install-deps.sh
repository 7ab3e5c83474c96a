#!/usr/bin/env bash
# Installs the Debian packages the test node needs: containerd and runc (container runtime),
# the CNI plugins, iptables and nftables (kube-proxy, CNI portmap), buildah and debootstrap
# (local images), conntrack and socat (kube-proxy, port-forward, the host's API bridge).
#
# Idempotent and quiet: when everything is present it does no network access and prints
# nothing. Run as root. The distribution's containerd service is never used: the node starts
# its own containerd with its own root, state and socket; a system containerd started by the
# package's postinst is stopped here.
set -euo pipefail

APT_PACKAGES=(containerd runc containernetworking-plugins iptables nftables buildah debootstrap
	conntrack socat)

log() { printf 'node/install-deps: %s\n' "$*" >&2; }

# Runs a command quietly; shows its output only when it fails.
quiet() {
	local out
	if ! out="$("$@" 2>&1)"; then
		printf '%s\n' "$out" >&2
		log "failed: $*"
		return 1
	fi
}

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
	dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
((${#missing[@]})) || exit 0

if [[ $(id -u) -ne 0 ]]; then
	log "missing Debian packages (${missing[*]}); run this script as root"
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
log "installing ${missing[*]}"
# Update the package lists only when they are absent or when an install from them fails.
# (Debian may store them compressed: *_Packages.lz4.)
if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
	quiet apt-get update
fi
if ! quiet apt-get install -y --no-install-recommends "${missing[@]}"; then
	quiet apt-get update
	quiet apt-get install -y --no-install-recommends "${missing[@]}"
fi

# The postinst may have started the system service (unless policy-rc.d denied it); the node
# never uses it, and it would hold /run/containerd.
if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
	systemctl disable --now containerd >/dev/null 2>&1 || true
elif command -v service >/dev/null 2>&1; then
	service containerd stop >/dev/null 2>&1 || true
fi
