# Settings and helpers shared by the test node's scripts (sourced, not run).
# shellcheck shell=bash disable=SC2034 # the variables are used by the scripts that source this

node_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

cache_root="${BULWARK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bulwark}"

# The network namespace holding the whole node, and the node's addresses inside it. Nothing in
# it routes outside: no default route, no veth to the host.
NODE_NETNS="${BULWARK_NODE_NETNS:-bulwark-node}"
NODE_NAME=bulwark-node
NODE_BRIDGE=node0
NODE_IP=10.200.0.1
NODE_PREFIX=24
POD_BRIDGE=cni0
POD_CIDR=10.244.0.0/24
# Every node's pods: node k (1-based) takes 10.244.(k-1).0/24.
CLUSTER_POD_CIDR=10.244.0.0/16
SERVICE_CIDR=10.96.0.0/16
API_SERVICE_IP=10.96.0.1
DNS_SERVICE_IP=10.96.0.10
API_PORT=6443
CLUSTER_DOMAIN=cluster.local
# The host reaches the API server on this loopback port (socat, through a unix socket).
API_HOST_PORT="${BULWARK_NODE_API_PORT:-16443}"

# Nodes beyond the first: node 1 ($NODE_NAME) holds the control plane in $NODE_NETNS; node k
# (2..) runs its own containerd, kubelet and kube-proxy in a network namespace of its own,
# joined to node 1's bridge by a veth pair. `node.sh up` records the count it was started with.
# The count `up` starts: BULWARK_NODE_COUNT, default 1.
NODE_COUNT_WANTED="${BULWARK_NODE_COUNT:-1}"
node_name() { if (($1 == 1)); then echo "$NODE_NAME"; else echo "$NODE_NAME-$1"; fi; }
node_netns() { if (($1 == 1)); then echo "$NODE_NETNS"; else echo "$NODE_NETNS-$1"; fi; }
node_ip() { echo "10.200.0.$1"; }
node_pod_cidr() { echo "10.244.$(($1 - 1)).0/24"; }

# Runtime state: certificates, etcd, the kubelet's root, local-path volumes, logs, PID files.
# On disk rather than a tmpfs because pod volumes and MariaDB data would otherwise sit in
# memory; containerd's root (images, container layers) is a tmpfs inside it unless
# BULWARK_NODE_CONTAINERD_TMPFS=0 (see node.sh). `node.sh down` removes all of it.
NODE_STATE="${BULWARK_NODE_STATE:-/var/lib/bulwark-node}"
# The cgroup (in every v1 hierarchy) holding every process of the node, pods included.
NODE_CGROUP="/$NODE_NETNS"

# Local images; the sandbox image is the one containerd is configured with.
PAUSE_IMAGE=bulwark.local/pause:1
BASE_IMAGE=bulwark.local/debian:bookworm
MARIADB_IMAGE=docker.io/library/mariadb:10.11
EXPORTER_IMAGE=bulwark.local/mysqld-exporter:0.14
IMAGES_CACHE="$cache_root/node/images"

# Prints "seconds.millis" since the epoch, for timings.
now() { date +%s.%3N; }
# Prints the difference of two now() values with one decimal.
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
