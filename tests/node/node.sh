#!/usr/bin/env bash
# A real single-node Kubernetes cluster for Bulwark's tests, inside a network namespace.
#
#   node.sh up       bring the node up (idempotent) and wait until it is really usable
#   node.sh down     stop everything and leave the host as it was
#   node.sh status   say whether the node is up, with its components
#   node.sh env      print shell exports: KUBECONFIG (the host's), paths, the namespace's name
#   node.sh node stop|start K   node K (2..) stops (every process killed) / starts again
#   node.sh cut A B  drop every packet between A and B (nodes or pod addresses), both ways
#   node.sh heal     undo every cut
#
# BULWARK_NODE_COUNT (default 1) nodes: node 1 holds the control plane as below; node k (2..)
# runs its own containerd, kubelet and kube-proxy in a network namespace of its own
# ($NODE_NETNS-k, address 10.200.0.k, pods 10.244.(k-1).0/24), joined to node 1's bridge by a
# veth pair, in a mount namespace and cgroup of its own, with its own volume directory (a
# claim is bound to its node). `node stop` sets its veth down and kills every process of it
# but its supervisor, which keeps its mount namespace (images, volumes: the node's disk).
#
# Layout (see shared/design/real-node.md beside the project for why each piece is there):
# - The network namespace $NODE_NETNS holds only loopback, a bridge without ports giving the node
#   its address ($NODE_BRIDGE, $NODE_IP), the pods' CNI bridge and a route of the Service range
#   to the node bridge. It has no default route and no link to the host, so nothing in it can
#   send traffic outside it: a pod connecting elsewhere gets "network is unreachable".
# - Every component is started by one supervisor process,
#   `setsid unshare --mount --propagation slave nsenter --net=/run/netns/$NODE_NETNS`, in a
#   private mount namespace where / is made rshared (the kubelet's volume mounts reach
#   containerd and the containers) and where tmpfs or bind mounts cover the paths containerd
#   and the kubelet hard-code, and the /proc/sys files the kubelet would write: the host's
#   sysctls never change and every mount vanishes with the namespace.
# - Components: etcd, kube-apiserver, kube-controller-manager (../controlplane/build.sh),
#   kube-scheduler, containerd, kubelet, kube-proxy (iptables mode), CoreDNS and
#   local-path-provisioner (./build.sh). CoreDNS and local-path-provisioner run as processes
#   of the node rather than pods: they need no image, start with the rest, log next to the
#   rest and stop with the rest; the kube-dns Service points at CoreDNS on the node address
#   through an EndpointSlice, and local-path-provisioner's helper pods use the local Debian
#   image. The StorageClass `local-path` is the default one.
# - Every process of the node, pods included, is in the cgroup $NODE_CGROUP (created in every
#   v1 hierarchy; the kubelet's cgroupRoot), so `down` finds all of them there.
# - The host reaches the API server on 127.0.0.1:$API_HOST_PORT: a socat on the host's
#   loopback forwards to a unix socket in the state directory, which a socat inside the
#   namespace forwards to the API server. No address of the host other than loopback is used.
# - State (certificates, etcd, containerd, kubelet, volumes, logs) is in $NODE_STATE; `down`
#   removes it. Logs are in $NODE_STATE/logs; when `up` fails it prints the relevant tails,
#   copies the logs to a directory under /tmp and tears the node down (unless
#   BULWARK_NODE_KEEP_ON_FAILURE=1).
#
# Settings: BULWARK_NODE_STATE, BULWARK_NODE_NETNS, BULWARK_NODE_API_PORT (lib.sh),
# BULWARK_NODE_TIMEOUT (seconds `up` waits for readiness, default 180),
# BULWARK_NODE_CONTAINERD_TMPFS (default 1: containerd's root, the images and container layers,
# on a tmpfs of BULWARK_NODE_CONTAINERD_TMPFS_SIZE, default 4g; 0: on disk in the state dir),
# BULWARK_NODE_KEEP_ON_FAILURE (1: a failed `up` leaves the node for inspection).
set -euo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# runc, ip, iptables live in sbin, which a non-login root shell may lack.
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

log() { echo "node.sh: $*" >&2; }
die() {
	log "$*"
	exit 1
}

pki="$NODE_STATE/pki"
kubeconfigs="$NODE_STATE/kubeconfig"
config="$NODE_STATE/config"
logs="$NODE_STATE/logs"
pids="$NODE_STATE/pids"
sock_dir="$NODE_STATE/run"
containerd_sock="$NODE_STATE/containerd/containerd.sock"
api_bridge_sock="$sock_dir/apiserver.sock"
host_kubeconfig="$kubeconfigs/admin-host.kubeconfig"
inner_kubeconfig="$kubeconfigs/admin.kubeconfig"
netns_path="/run/netns/$NODE_NETNS"
count_file="$NODE_STATE/node-count"
# Components in start order on every other node; a node's `stop` kills them with its pods.
worker_components=(containerd kubelet kube-proxy)
# Components in start order; `down` stops them in reverse.
components=(etcd kube-apiserver api-bridge kube-controller-manager kube-scheduler containerd
	kubelet kube-proxy coredns local-path-provisioner)
# Host paths containerd and the kubelet hard-code, covered inside the node's mount namespace.
covered_dirs=(/run/containerd /var/lib/cni /var/log/containers)
# Values the kubelet wants for host-wide sysctls; bind-mounted files hold them so it reads them
# and never writes the host's.
kubelet_sysctls=(kernel/panic=10 kernel/panic_on_oops=1 vm/overcommit_memory=1 vm/panic_on_oom=0
	kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000)

# Cgroup v1 hierarchies (mount points), one per line.
cgroup_hierarchies() { awk '$9 == "cgroup" { print $5 }' /proc/self/mountinfo | sort -u; }
# Every cgroup mount, v2 included: on a hybrid host the kubelet also creates its tree in the
# unified one.
cgroup_mounts() { awk '$9 == "cgroup" || $9 == "cgroup2" { print $5 }' /proc/self/mountinfo | sort -u; }

# The v1 hierarchy whose cgroup.procs files list the node's processes: pids, or any other.
pids_hierarchy() { cgroup_hierarchies | grep -m1 '/pids$' || cgroup_hierarchies | head -n1; }

# The PIDs of every process in the node's cgroup tree (the pids hierarchy, or any other).
node_cgroup_pids() {
	local h
	h="$(pids_hierarchy)"
	[[ -n "$h" && -d "$h$NODE_CGROUP" ]] || return 0
	find "$h$NODE_CGROUP" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -un
}

pid_of() { cat "$pids/$1.pid" 2>/dev/null || true; }
# Whether PID $1 is a process of the node (in its cgroup): a PID file that outlived its process
# (the state survives a reboot) may name another process by now, which is never signalled.
ours() { [[ -n "$1" ]] && grep -q ":$NODE_CGROUP\(/\|\$\)" "/proc/$1/cgroup" 2>/dev/null; }
# Whether PID $1 runs (a zombie, exited but not yet reaped by its parent, does not).
alive() {
	[[ -n "$1" ]] && kill -0 "$1" 2>/dev/null &&
		[[ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]]
}

kubectl_host() { "$NODE_BIN/kubectl" --kubeconfig "$host_kubeconfig" "$@"; }

# Where node $1's own things are: node 1's are the node's (beside the control plane's), node k's
# under nodes/k.
node_state() { if (($1 == 1)); then echo "$NODE_STATE"; else echo "$NODE_STATE/nodes/$1"; fi; }
node_config() { if (($1 == 1)); then echo "$config"; else echo "$NODE_STATE/nodes/$1/config"; fi; }
node_sock() { echo "$(node_state "$1")/containerd/containerd.sock"; }
node_cgroup() { if (($1 == 1)); then echo "$NODE_CGROUP"; else echo "$NODE_CGROUP/node-$1"; fi; }
node_kubelet_cert() { if (($1 == 1)); then echo kubelet; else echo "kubelet-$1"; fi; }
# The node's end of node k's veth pair, in node 1's namespace (on its bridge).
node_link() { echo "nk$1"; }
# How many nodes the running cluster has (what `up` was started with).
node_count() { cat "$count_file" 2>/dev/null || echo 1; }

# Whether the node is up: its supervisor runs and the host's API bridge answers.
is_up() {
	alive "$(pid_of supervisor)" && alive "$(pid_of host-api-bridge)" && [[ -e "$netns_path" ]]
}

# Locates the binaries (building them on first use) and exports their directories.
find_binaries() {
	CP_BIN="$(bash "$node_dir/../controlplane/build.sh")"
	NODE_BIN="$(bash "$node_dir/build.sh")"
	export CP_BIN NODE_BIN
}

### Certificates and configuration ###

# Signs a certificate for key $1.key: name $2, subject $3, extended key usage $4, SANs $5.
sign() {
	local name="$1" subject="$2" usage="$3" sans="${4:-}"
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/$name.key" 2>/dev/null
	{
		echo "basicConstraints = critical, CA:FALSE"
		echo "keyUsage = critical, digitalSignature, keyEncipherment"
		echo "extendedKeyUsage = $usage"
		[[ -z "$sans" ]] || echo "subjectAltName = $sans"
	} >"$pki/$name.ext"
	openssl req -new -key "$pki/$name.key" -subj "$subject" -out "$pki/$name.csr" 2>/dev/null
	openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -set_serial "0x$(openssl rand -hex 8)" \
		-days 30 -extfile "$pki/$name.ext" -out "$pki/$name.crt" 2>/dev/null
	rm -f "$pki/$name.csr" "$pki/$name.ext"
}

make_pki() {
	mkdir -p "$pki"
	chmod 700 "$pki"
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/ca.key" 2>/dev/null
	cat >"$pki/ca.cnf" <<-EOF
		[req]
		distinguished_name = dn
		prompt = no
		[dn]
		CN = bulwark-node-ca
		[ca]
		basicConstraints = critical, CA:TRUE
		keyUsage = critical, keyCertSign, cRLSign, digitalSignature
		subjectKeyIdentifier = hash
	EOF
	openssl req -x509 -new -key "$pki/ca.key" -config "$pki/ca.cnf" -extensions ca -days 30 \
		-out "$pki/ca.crt" 2>/dev/null
	sign apiserver "/CN=kube-apiserver" serverAuth \
		"DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc, DNS:kubernetes.default.svc.$CLUSTER_DOMAIN, DNS:localhost, IP:$NODE_IP, IP:$API_SERVICE_IP, IP:127.0.0.1"
	sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
	sign admin "/O=system:masters/CN=bulwark-node-admin" clientAuth
	local k
	for ((k = 1; k <= NODE_COUNT_WANTED; k++)); do
		sign "$(node_kubelet_cert "$k")" "/O=system:nodes/CN=system:node:$(node_name "$k")" \
			"serverAuth, clientAuth" "DNS:$(node_name "$k"), IP:$(node_ip "$k")"
	done
	sign kube-controller-manager "/CN=system:kube-controller-manager" clientAuth
	sign kube-scheduler "/CN=system:kube-scheduler" clientAuth
	sign kube-proxy "/CN=system:kube-proxy" clientAuth
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/sa.key" 2>/dev/null
	openssl pkey -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
}

# Writes kubeconfig $1 for the certificate $2 and the server $3.
kubeconfig() {
	cat >"$kubeconfigs/$1.kubeconfig" <<-EOF
		apiVersion: v1
		kind: Config
		clusters:
		- name: bulwark-node
		  cluster:
		    certificate-authority: $pki/ca.crt
		    server: $3
		users:
		- name: $2
		  user:
		    client-certificate: $pki/$2.crt
		    client-key: $pki/$2.key
		contexts:
		- name: bulwark-node
		  context:
		    cluster: bulwark-node
		    user: $2
		current-context: bulwark-node
	EOF
}

# Writes node $1's containerd, CNI, kubelet and kube-proxy configuration and makes its
# directories. Every node shares the cluster's resolv.conf and the kube-proxy identity.
node_files() {
	local k="$1" dir state sock cert
	dir="$(node_config "$k")" state="$(node_state "$k")" sock="$(node_sock "$k")"
	cert="$(node_kubelet_cert "$k")"
	mkdir -p "$dir/cni" "$state/cni/ipam" "$state/cni/lib" "$state/log-containers" \
		"$state/pod-logs" "$state/local-path" "$state/kubelet/volume-plugins" "$state/containerd" \
		"$state/sysctl"
	cat >"$dir/containerd.toml" <<-EOF
		version = 2
		root = "$state/containerd/root"
		state = "$state/containerd/state"
		# Snapshotters and tracing that cannot work here (or are not needed) stay off.
		disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
		  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
		  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
		[grpc]
		  address = "$sock"
		[metrics]
		  address = ""
		[plugins]
		  # Would create /opt/containerd on the host.
		  [plugins."io.containerd.internal.v1.opt"]
		    path = "$state/containerd/opt"
		  [plugins."io.containerd.grpc.v1.cri"]
		    sandbox_image = "$PAUSE_IMAGE"
		    # Root here lacks CAP_SYS_RESOURCE: runc could not lower oom_score_adj to -998.
		    restrict_oom_score_adj = true
		    # Pod network namespaces would otherwise be pinned in the host's /run/netns.
		    netns_mounts_under_state_dir = true
		    enable_selinux = false
		    stream_server_address = "127.0.0.1"
		    [plugins."io.containerd.grpc.v1.cri".containerd]
		      snapshotter = "overlayfs"
		      default_runtime_name = "runc"
		      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
		        runtime_type = "io.containerd.runc.v2"
		        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
		          SystemdCgroup = false
		    [plugins."io.containerd.grpc.v1.cri".cni]
		      bin_dir = "/usr/lib/cni"
		      conf_dir = "$dir/cni"
	EOF

	cat >"$dir/cni/10-bulwark.conflist" <<-EOF
		{
		  "cniVersion": "0.4.0",
		  "name": "bulwark",
		  "plugins": [
		    {
		      "type": "bridge",
		      "bridge": "$POD_BRIDGE",
		      "isGateway": true,
		      "ipMasq": false,
		      "hairpinMode": true,
		      "ipam": {
		        "type": "host-local",
		        "ranges": [[{"subnet": "$(node_pod_cidr "$k")"}]],
		        "routes": [{"dst": "0.0.0.0/0"}],
		        "dataDir": "$state/cni/ipam"
		      }
		    },
		    {"type": "portmap", "capabilities": {"portMappings": true}}
		  ]
		}
	EOF

	cat >"$dir/kubelet.yaml" <<-EOF
		apiVersion: kubelet.config.k8s.io/v1beta1
		kind: KubeletConfiguration
		authentication:
		  anonymous: {enabled: false}
		  webhook: {enabled: true}
		  x509: {clientCAFile: $pki/ca.crt}
		authorization: {mode: Webhook}
		tlsCertFile: $pki/$cert.crt
		tlsPrivateKeyFile: $pki/$cert.key
		readOnlyPort: 0
		healthzBindAddress: 127.0.0.1
		containerRuntimeEndpoint: unix://$sock
		# containerd 1.6 cannot report its cgroup driver; cgroup v1 is still accepted.
		cgroupDriver: cgroupfs
		cgroupRoot: $(node_cgroup "$k")
		failCgroupV1: false
		failSwapOn: false
		clusterDNS: [$DNS_SERVICE_IP]
		clusterDomain: $CLUSTER_DOMAIN
		resolvConf: $config/resolv.conf
		podLogsDir: $state/pod-logs
		volumePluginDir: $state/kubelet/volume-plugins
		# Imported images cannot be pulled again: never collect them.
		imageGCHighThresholdPercent: 100
		imageGCLowThresholdPercent: 99
		evictionHard: {memory.available: 100Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%}
		protectKernelDefaults: false
		rotateCertificates: false
		serverTLSBootstrap: false
	EOF

	cat >"$dir/kube-proxy.yaml" <<-EOF
		apiVersion: kubeproxy.config.k8s.io/v1alpha1
		kind: KubeProxyConfiguration
		clientConnection: {kubeconfig: $kubeconfigs/kube-proxy.kubeconfig}
		hostnameOverride: $(node_name "$k")
		# --proxy-mode is ignored when a config file is given.
		mode: iptables
		clusterCIDR: $CLUSTER_POD_CIDR
		detectLocalMode: ClusterCIDR
		healthzBindAddress: 127.0.0.1:10256
		metricsBindAddress: 127.0.0.1:10249
		# Zero leaves the host-wide conntrack settings alone.
		conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
	EOF
}

make_config() {
	mkdir -p "$kubeconfigs" "$config" "$sock_dir"
	local inner="https://$NODE_IP:$API_PORT" c k
	kubeconfig admin admin "$inner"
	kubeconfig admin-host admin "https://127.0.0.1:$API_HOST_PORT"
	for c in kube-controller-manager kube-scheduler kube-proxy; do
		kubeconfig "$c" "$c" "$inner"
	done
	for ((k = 1; k <= NODE_COUNT_WANTED; k++)); do
		c="$(node_kubelet_cert "$k")"
		kubeconfig "$c" "$c" "$inner"
		node_files "$k"
	done
	echo "nameserver $DNS_SERVICE_IP" >"$config/resolv.conf"

	# Each node's volumes in its own directory: a claim is bound to its node and goes with it.
	local path_map
	path_map="{\"node\": \"DEFAULT_PATH_FOR_NON_LISTED_NODES\", \"paths\": [\"$NODE_STATE/local-path\"]}"
	for ((k = 2; k <= NODE_COUNT_WANTED; k++)); do
		path_map+=", {\"node\": \"$(node_name "$k")\", \"paths\": [\"$(node_state "$k")/local-path\"]}"
	done


	# No forward plugin: names outside the cluster are never resolved elsewhere.
	cat >"$config/Corefile" <<-EOF
		.:53 {
		    errors
		    health 127.0.0.1:8080
		    ready 127.0.0.1:8181
		    kubernetes $CLUSTER_DOMAIN in-addr.arpa ip6.arpa {
		        kubeconfig $inner_kubeconfig
		        pods insecure
		        fallthrough in-addr.arpa ip6.arpa
		    }
		    cache 30
		    loadbalance
		}
	EOF

	cat >"$config/cluster.yaml" <<-EOF
		apiVersion: v1
		kind: Service
		metadata:
		  name: kube-dns
		  namespace: kube-system
		  labels: {k8s-app: kube-dns, kubernetes.io/name: CoreDNS}
		spec:
		  clusterIP: $DNS_SERVICE_IP
		  ports:
		  - {name: dns, port: 53, protocol: UDP, targetPort: 53}
		  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
		---
		# CoreDNS runs on the node, not in a pod: its endpoint is the node's address.
		apiVersion: discovery.k8s.io/v1
		kind: EndpointSlice
		metadata:
		  name: kube-dns-node
		  namespace: kube-system
		  labels:
		    kubernetes.io/service-name: kube-dns
		    endpointslice.kubernetes.io/managed-by: bulwark.dev-node
		addressType: IPv4
		endpoints:
		- addresses: [$NODE_IP]
		  conditions: {ready: true}
		  nodeName: $NODE_NAME
		ports:
		- {name: dns, port: 53, protocol: UDP}
		- {name: dns-tcp, port: 53, protocol: TCP}
		---
		apiVersion: v1
		kind: Namespace
		metadata: {name: local-path-storage}
		---
		apiVersion: v1
		kind: ServiceAccount
		metadata: {name: local-path-provisioner-service-account, namespace: local-path-storage}
		---
		apiVersion: v1
		kind: ConfigMap
		metadata: {name: local-path-config, namespace: local-path-storage}
		data:
		  config.json: |-
		    {"nodePathMap": [$path_map]}
		  setup: |-
		    #!/bin/sh
		    set -eu
		    mkdir -m 0777 -p "\$VOL_DIR"
		  teardown: |-
		    #!/bin/sh
		    set -eu
		    rm -rf "\$VOL_DIR"
		  helperPod.yaml: |-
		    apiVersion: v1
		    kind: Pod
		    metadata:
		      name: helper-pod
		    spec:
		      priorityClassName: system-node-critical
		      tolerations:
		      - {key: node.kubernetes.io/disk-pressure, operator: Exists, effect: NoSchedule}
		      containers:
		      - name: helper-pod
		        image: $BASE_IMAGE
		        imagePullPolicy: Never
		---
		apiVersion: storage.k8s.io/v1
		kind: StorageClass
		metadata:
		  name: local-path
		  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
		provisioner: rancher.io/local-path
		volumeBindingMode: WaitForFirstConsumer
		reclaimPolicy: Delete
	EOF
}

### Inside the node (the supervisor) ###

# Starts component $1 with the given command, logging to its file and recording its PID.
start() {
	local name="$1"
	shift
	"$@" >>"$logs/$name.log" 2>&1 &
	echo $! >"$pids/$name.pid"
	echo "$(date -u +%T) started $name (pid $!)"
}

# Waits up to $2 seconds for a condition (the rest of the arguments), dying if $1's process exits.
wait_for() {
	local name="$1" timeout="$2" deadline
	shift 2
	deadline=$((SECONDS + timeout))
	until "$@" >/dev/null 2>&1; do
		alive "$(pid_of "$name")" || die "$name exited; see $logs/$name.log"
		((SECONDS < deadline)) || die "$name not ready after ${timeout}s; see $logs/$name.log"
		sleep 0.2
	done
}

tcp_open() { (exec 3<>"/dev/tcp/$1/$2"); }
kubectl_inner() { "$NODE_BIN/kubectl" --kubeconfig "$inner_kubeconfig" "$@"; }

# Stops the components: the node's first, then the API server (which can take long to drain:
# it gets 3 s, as nothing of this cluster is kept), then etcd once no client is left (it waits
# for its clients' streams otherwise). SIGKILL follows SIGTERM after each grace period.
stop_components() {
	trap - TERM INT
	local c pid first=()
	for c in "${components[@]}"; do
		pid="$(pid_of "$c")"
		[[ "$c" == etcd || "$c" == kube-apiserver ]] || ! alive "$pid" || first+=("$pid")
	done
	terminate 10 "${first[@]}"
	for c in kube-apiserver:3 etcd:5; do
		pid="$(pid_of "${c%:*}")"
		! alive "$pid" || terminate "${c#*:}" "$pid"
	done
	# Reap them: a component that exited but is not waited for stays a zombie, handed to the
	# host's init when this shell exits, and is still in the process table after `down`.
	for c in "${components[@]}"; do
		pid="$(pid_of "$c")"
		[[ -z "$pid" ]] || wait "$pid" 2>/dev/null || true
	done
	echo "$(date -u +%T) stopped"
	exit 0
}

# Moves this shell (or subshell) into node $1's cgroup $2 (default system): every process it
# starts from here on is found there by `down` (and by `node stop`).
join_cgroup() {
	local h
	while read -r h; do
		echo "$BASHPID" >"$h$(node_cgroup "$1")/${2:-system}/cgroup.procs"
	done < <(cgroup_hierarchies | grep -E '/(pids|freezer)$' || true)
}

# Runs the command (in a background subshell of `start`) in node $1's system cgroup: a worker's
# supervisor stays apart, in its own, so that `node stop` kills all but it.
in_node_cgroup() {
	join_cgroup "$1"
	shift
	exec "$@"
}

# Covers, in this mount namespace, the host paths node $1's containerd and kubelet hard-code, and
# the /proc/sys files the kubelet would write. Mounts made from here on propagate to the
# containers, and none reaches the host.
cover_host_paths() {
	local state entry name value
	state="$(node_state "$1")"
	mount --make-rshared /
	mount -t tmpfs -o mode=0711 "bulwark-node-$1-containerd" /run/containerd
	mount --bind "$state/cni/lib" /var/lib/cni
	mount --bind "$state/log-containers" /var/log/containers
	for entry in "${kubelet_sysctls[@]}"; do
		name="${entry%%=*}" value="${entry#*=}"
		[[ -e "/proc/sys/$name" ]] || continue
		echo "$value" >"$state/sysctl/${name//\//.}"
		mount --bind "$state/sysctl/${name//\//.}" "/proc/sys/$name"
	done
	if [[ "${BULWARK_NODE_CONTAINERD_TMPFS:-1}" == 1 ]]; then
		# Images and container layers in memory: imports write no disk and `down` has nothing
		# to delete.
		mkdir -p "$state/containerd/root"
		mount -t tmpfs -o mode=0700,size="${BULWARK_NODE_CONTAINERD_TMPFS_SIZE:-4g}" \
			"bulwark-node-$1-containerd-root" "$state/containerd/root"
	fi
}

# Starts node $1's containerd, kubelet and kube-proxy.
start_node() {
	local k="$1" dir sock
	dir="$(node_config "$k")" sock="$(node_sock "$k")"
	local c=(in_node_cgroup "$k")
	start containerd "${c[@]}" containerd --config "$dir/containerd.toml"
	wait_for containerd 30 ctr -a "$sock" version
	start kubelet "${c[@]}" "$NODE_BIN/kubelet" --config "$dir/kubelet.yaml" \
		--kubeconfig "$kubeconfigs/$(node_kubelet_cert "$k").kubeconfig" \
		--root-dir "$(node_state "$k")/kubelet" --hostname-override "$(node_name "$k")" \
		--node-ip "$(node_ip "$k")"
	start kube-proxy "${c[@]}" "$NODE_BIN/kube-proxy" --config "$dir/kube-proxy.yaml"
}

inner() {
	join_cgroup 1
	trap stop_components TERM INT
	cover_host_paths 1

	start etcd "$CP_BIN/etcd" --name "$NODE_NAME" --data-dir "$NODE_STATE/etcd" \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster "$NODE_NAME=http://127.0.0.1:2380" --unsafe-no-fsync --log-level warn
	wait_for etcd 30 tcp_open 127.0.0.1 2379

	start kube-apiserver "$CP_BIN/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
		--advertise-address "$NODE_IP" --secure-port "$API_PORT" \
		--service-cluster-ip-range "$SERVICE_CIDR" --allow-privileged=true \
		--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
		--client-ca-file "$pki/ca.crt" --tls-cert-file "$pki/apiserver.crt" \
		--tls-private-key-file "$pki/apiserver.key" \
		--kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
		--kubelet-client-key "$pki/apiserver-kubelet-client.key" \
		--kubelet-certificate-authority "$pki/ca.crt" --kubelet-preferred-address-types InternalIP \
		--service-account-issuer "https://kubernetes.default.svc.$CLUSTER_DOMAIN" \
		--service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
		--profiling=false
	wait_for kube-apiserver 60 kubectl_inner get --raw /readyz

	start api-bridge socat "UNIX-LISTEN:$api_bridge_sock,fork,unlink-early,mode=600" \
		"TCP:127.0.0.1:$API_PORT"

	local delegated=(--authentication-kubeconfig "$kubeconfigs/kube-controller-manager.kubeconfig"
		--authorization-kubeconfig "$kubeconfigs/kube-controller-manager.kubeconfig")
	start kube-controller-manager "$CP_BIN/kube-controller-manager" \
		--kubeconfig "$kubeconfigs/kube-controller-manager.kubeconfig" "${delegated[@]}" \
		--bind-address 127.0.0.1 --leader-elect=false --root-ca-file "$pki/ca.crt" \
		--service-account-private-key-file "$pki/sa.key" --service-cluster-ip-range "$SERVICE_CIDR" \
		--cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
		--use-service-account-credentials=true --profiling=false
	delegated=(--authentication-kubeconfig "$kubeconfigs/kube-scheduler.kubeconfig"
		--authorization-kubeconfig "$kubeconfigs/kube-scheduler.kubeconfig")
	start kube-scheduler "$NODE_BIN/kube-scheduler" \
		--kubeconfig "$kubeconfigs/kube-scheduler.kubeconfig" "${delegated[@]}" \
		--bind-address 127.0.0.1 --leader-elect=false --profiling=false
	# Objects of the cluster itself: the DNS Service, local-path's configuration, the StorageClass.
	wait_for kube-apiserver 30 kubectl_inner apply -f "$config/cluster.yaml"

	start_node 1
	start coredns "$NODE_BIN/coredns" -conf "$config/Corefile"
	start local-path-provisioner "$NODE_BIN/local-path-provisioner" start \
		--kubeconfig "$inner_kubeconfig" --namespace local-path-storage \
		--service-account-name local-path-provisioner-service-account \
		--configmap-name local-path-config --helper-image "$BASE_IMAGE"
	echo "$(date -u +%T) all components started"

	# Report a component that exits; stop everything on SIGTERM.
	while true; do
		wait -n || true
		local c
		for c in "${components[@]}"; do
			if [[ -f "$pids/$c.pid" ]] && ! alive "$(pid_of "$c")" && [[ ! -f "$pids/$c.exited" ]]; then
				echo "$(date -u +%T) $c exited; see $logs/$c.log"
				touch "$pids/$c.exited"
			fi
		done
		sleep 1
	done
}

# PIDs of node $1's components, shims and containers: its cgroup tree but its supervisor's.
node_pids_but_supervisor() {
	local h cg
	h="$(pids_hierarchy)"
	cg="$h$(node_cgroup "$1")"
	[[ -n "$h" && -d "$cg" ]] || die "node $1 has no cgroup in $h: its processes cannot be found"
	find "$cg" -path "$cg/supervisor" -prune -o -name cgroup.procs -exec cat {} + 2>/dev/null | sort -un
}

# Node $1 stops as if its power went: every process of it (components, shims, containers) is killed at
# once, and what a reboot clears goes: containerd's runtime state and pod network namespaces.
# Its disk stays: volumes, the kubelet's directory, containerd's images.
power_off() {
	local k="$1" state rest m
	state="$(node_state "$k")"
	for _ in $(seq 50); do
		mapfile -t rest < <(node_pids_but_supervisor "$k")
		((${#rest[@]})) || break
		kill -KILL "${rest[@]}" 2>/dev/null || true
		sleep 0.2
	done
	for c in "${worker_components[@]}"; do
		rm -f "$pids/$c.pid" "$pids/$c.exited"
	done
	awk -v s="$state/containerd/state" -v r=/run/containerd/ 'index($5, s) == 1 || index($5, r) == 1 { print $5 }' \
		/proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
	rm -rf --one-file-system "${state:?}/containerd/state"
	umount -l /run/containerd 2>/dev/null || true
	mount -t tmpfs -o mode=0711 "bulwark-node-$k-containerd" /run/containerd
	touch "$pids/off"
	echo "$(date -u +%T) powered off"
}

# The supervisor of node $1 (2..): holds the node's mount namespace (so its containerd images
# and mounts survive a `node stop`), starts its components, and on SIGUSR1 powers the node off
# (`node stop`), on SIGUSR2 on again (`node start`), on SIGTERM stops it for good.
worker() {
	local k="$1"
	logs="$(node_state "$k")/logs" pids="$(node_state "$k")/pids"
	mkdir -p "$logs" "$pids"
	join_cgroup "$k" supervisor
	cover_host_paths "$k"
	local wanted=on
	trap 'wanted=off' USR1
	trap 'wanted=on' USR2
	trap 'power_off "$k"; echo "$(date -u +%T) stopped"; exit 0' TERM INT
	local running=off
	while true; do
		if [[ "$wanted" == on && "$running" == off ]]; then
			rm -f "$pids/off"
			# In a subshell: a component that fails to start (its `die`) ends that, not the
			# supervisor, and the node stays stoppable and startable.
			if (start_node "$k"); then
				echo "$(date -u +%T) node $k started"
			else
				echo "$(date -u +%T) node $k failed to start; see $logs"
			fi
			running=on
		elif [[ "$wanted" == off && "$running" == on ]]; then
			power_off "$k"
			running=off
		fi
		if [[ "$running" == on ]]; then
			for c in "${worker_components[@]}"; do
				if [[ -f "$pids/$c.pid" ]] && ! alive "$(pid_of "$c")" && [[ ! -f "$pids/$c.exited" ]]; then
					echo "$(date -u +%T) $c exited; see $logs/$c.log"
					touch "$pids/$c.exited"
				fi
			done
		fi
		# A signal interrupts the wait, not a foreground sleep.
		sleep 0.5 &
		wait $! 2>/dev/null || true
	done
}

### On the host ###

# Sends an A query for $1 to the cluster DNS from inside the namespace; succeeds when the
# answer is NOERROR and ends with the address $2. The query is written by one printf, so that
# socat sends it as one datagram.
dns_answers() {
	local name="$1" want="$2" label query reply octets hex
	IFS=. read -ra octets <<<"$want"
	hex="$(printf '%02x' "${octets[@]}")"
	query='\x42\x42\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00'
	for label in ${name//./ }; do
		query+="\\x$(printf %02x "${#label}")$label"
	done
	query+='\x00\x00\x01\x00\x01'
	# shellcheck disable=SC2059 # the query is the format
	reply="$(printf "$query" | nsenter --net="$netns_path" socat -T 0.5 -t 0.5 - "UDP:$DNS_SERVICE_IP:53" 2>/dev/null |
		od -An -v -tx1 | tr -d ' \n')"
	[[ "${reply:0:4}" == 4242 && "${reply:7:1}" == 0 && "$reply" == *"$hex" ]]
}

api_ready() { kubectl_host get --raw /readyz >/dev/null 2>&1; }
storage_class_present() { kubectl_host get storageclass local-path >/dev/null 2>&1; }

node_ready() {
	[[ "$(kubectl_host get node "${1:-$NODE_NAME}" \
		-o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

# Prints the tails of the logs most likely to explain a failure.
show_logs() {
	local f
	for f in "$logs/supervisor.log" "$@"; do
		[[ -s "$f" ]] || continue
		echo "---- tail of $f" >&2
		tail -n 25 "$f" >&2
	done
}

fail_up() {
	log "up failed: $1"
	show_logs "${@:2}"
	local keep
	keep="$(mktemp -d /tmp/bulwark-node-logs.XXXXXX)"
	cp -r "$logs/." "$keep/" 2>/dev/null || true
	log "logs kept in $keep"
	if [[ "${BULWARK_NODE_KEEP_ON_FAILURE:-}" == 1 ]]; then
		log "BULWARK_NODE_KEEP_ON_FAILURE=1: the node is left as it is; run '$0 down' to remove it"
	else
		down >&2
	fi
	exit 1
}

# Waits up to the deadline for a condition, failing `up` with the given logs if it never holds.
await() {
	local what="$1" logs_to_show="$2"
	shift 2
	local start
	start="$(now)"
	until "$@"; do
		if ! alive "$(pid_of supervisor)"; then
			# shellcheck disable=SC2086 # a list of paths
			fail_up "the node's supervisor exited while waiting for $what" $logs_to_show
		fi
		if ((SECONDS >= deadline)); then
			# shellcheck disable=SC2086 # a list of paths
			fail_up "timed out waiting for $what" $logs_to_show
		fi
		sleep 0.25
	done
	log "$what after $(elapsed "$start" "$(now)")s"
}

up() {
	[[ $(id -u) -eq 0 ]] || die "the node needs root"
	if is_up; then
		if [[ "$(node_count)" != "$NODE_COUNT_WANTED" ]]; then
			die "the cluster is up with $(node_count) nodes, not $NODE_COUNT_WANTED: run '$0 down' first"
		fi
		log "the node is already up (KUBECONFIG=$host_kubeconfig)"
		return 0
	fi
	[[ "$NODE_COUNT_WANTED" =~ ^[1-9]$ ]] || die "BULWARK_NODE_COUNT must be 1 to 9, not $NODE_COUNT_WANTED"
	if [[ -e "$NODE_STATE" || -e "$netns_path" ]] || compgen -G "/run/netns/$NODE_NETNS-[0-9]*" >/dev/null ||
		[[ -n "$(node_cgroup_pids)" ]]; then
		log "removing the remains of a previous node"
		down >&2
	fi
	bash "$node_dir/install-deps.sh"
	find_binaries
	if ss -ltnH "sport = :$API_HOST_PORT" | grep -q .; then
		die "port $API_HOST_PORT is in use on the host; set BULWARK_NODE_API_PORT"
	fi

	local t0
	t0="$(now)"
	deadline=$((SECONDS + ${BULWARK_NODE_TIMEOUT:-180}))
	mkdir -p "$NODE_STATE" "$logs" "$pids"
	chmod 700 "$NODE_STATE"
	make_pki
	make_config

	# The network namespace: loopback, the node's port-less bridge, nothing towards the host.
	[[ -d /run/netns ]] || touch "$NODE_STATE/created-run-netns"
	ip netns add "$NODE_NETNS"
	local nsx=(ip -n "$NODE_NETNS")
	"${nsx[@]}" link set lo up
	"${nsx[@]}" link add "$NODE_BRIDGE" type bridge
	"${nsx[@]}" addr add "$NODE_IP/$NODE_PREFIX" dev "$NODE_BRIDGE"
	"${nsx[@]}" link set "$NODE_BRIDGE" up
	"${nsx[@]}" route add "$SERVICE_CIDR" dev "$NODE_BRIDGE"
	# Per-namespace settings: pods are routed through the node; bridged pod traffic goes
	# through iptables (kube-proxy's rules).
	nsenter --net="$netns_path" sysctl -qw net.ipv4.ip_forward=1
	# Without it, traffic between pods of one node bypasses iptables: kube-proxy's hairpin and
	# every cut between pods of a node would silently do nothing.
	[[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]] ||
		die "the br_netfilter module is missing (net.bridge.bridge-nf-call-iptables)"
	nsenter --net="$netns_path" sysctl -qw net.bridge.bridge-nf-call-iptables=1
	# The other nodes: each in a namespace of its own, on node 1's bridge through a veth pair
	# (so nothing of theirs reaches the host either), routing each other's pods.
	echo "$NODE_COUNT_WANTED" >"$count_file"
	local k j wns
	for ((k = 2; k <= NODE_COUNT_WANTED; k++)); do
		wns="$(node_netns "$k")"
		ip netns add "$wns"
		"${nsx[@]}" link add "$(node_link "$k")" type veth peer name eth0 netns "$wns"
		"${nsx[@]}" link set "$(node_link "$k")" master "$NODE_BRIDGE" up
		ip -n "$wns" link set lo up
		ip -n "$wns" addr add "$(node_ip "$k")/$NODE_PREFIX" dev eth0
		ip -n "$wns" link set eth0 up
		ip -n "$wns" route add "$SERVICE_CIDR" dev eth0
		nsenter --net="/run/netns/$wns" sysctl -qw net.ipv4.ip_forward=1
		nsenter --net="/run/netns/$wns" sysctl -qw net.bridge.bridge-nf-call-iptables=1
	done
	for ((k = 1; k <= NODE_COUNT_WANTED; k++)); do
		for ((j = 1; j <= NODE_COUNT_WANTED; j++)); do
			((j == k)) || ip -n "$(node_netns "$k")" route add "$(node_pod_cidr "$j")" via "$(node_ip "$j")"
		done
	done

	# The node's cgroup in every v1 hierarchy (cpuset needs its CPUs and memory nodes first).
	local h
	while read -r h; do
		for ((k = 1; k <= NODE_COUNT_WANTED; k++)); do
			local g
			for g in "$(node_cgroup "$k")" "$(node_cgroup "$k")/system" "$(node_cgroup "$k")/supervisor"; do
				mkdir -p "$h$g"
				if [[ -f "$h/cpuset.cpus" ]]; then
					cat "$h/cpuset.cpus" >"$h$g/cpuset.cpus"
					cat "$h/cpuset.mems" >"$h$g/cpuset.mems"
				fi
			done
		done
	done < <(cgroup_hierarchies)

	# Mount points for the covered paths; the ones created here are removed by `down`.
	local d
	for d in "${covered_dirs[@]}"; do
		if [[ ! -d "$d" ]]; then
			mkdir -p "$d"
			echo "$d" >>"$NODE_STATE/created-dirs"
		fi
	done

	setsid unshare --mount --propagation slave nsenter --net="$netns_path" \
		"$BASH" "$node_dir/node.sh" __inner </dev/null >>"$logs/supervisor.log" 2>&1 &
	echo $! >"$pids/supervisor.pid"
	for ((k = 2; k <= NODE_COUNT_WANTED; k++)); do
		setsid unshare --mount --propagation slave nsenter --net="/run/netns/$(node_netns "$k")" \
			"$BASH" "$node_dir/node.sh" __worker "$k" </dev/null >>"$logs/node-$k.log" 2>&1 &
		echo $! >"$pids/node-$k.pid"
	done

	# The host's side of the API bridge, on loopback only, in the node's cgroup too.
	await "the API server" "$logs/kube-apiserver.log $logs/etcd.log" test -S "$api_bridge_sock"
	local procs
	mapfile -t procs < <(cgroup_hierarchies | grep -E '/(pids|freezer)$' |
		sed "s|\$|$NODE_CGROUP/system/cgroup.procs|")
	# shellcheck disable=SC2016 # expanded by the inner shell
	setsid sh -c 'listen="$1" connect="$2"; shift 2; for f; do echo $$ >"$f"; done
		exec socat "$listen" "$connect"' sh \
		"TCP-LISTEN:$API_HOST_PORT,bind=127.0.0.1,reuseaddr,fork" "UNIX-CONNECT:$api_bridge_sock" \
		"${procs[@]}" </dev/null >>"$logs/host-api-bridge.log" 2>&1 &
	echo $! >"$pids/host-api-bridge.pid"
	await "the API server from the host" "$logs/host-api-bridge.log $logs/api-bridge.log" api_ready
	for ((k = 1; k <= NODE_COUNT_WANTED; k++)); do
		local klogs="$logs/kubelet.log $logs/containerd.log"
		((k == 1)) || klogs="$logs/node-$k.log $(node_state "$k")/logs/kubelet.log $(node_state "$k")/logs/containerd.log"
		await "node $(node_name "$k") Ready" "$klogs" node_ready "$(node_name "$k")"
	done
	await "CoreDNS answering kubernetes.default.svc.$CLUSTER_DOMAIN" \
		"$logs/coredns.log $logs/kube-proxy.log" \
		dns_answers "kubernetes.default.svc.$CLUSTER_DOMAIN" "$API_SERVICE_IP"
	await "StorageClass local-path" "$logs/local-path-provisioner.log" storage_class_present
	log "up in $(elapsed "$t0" "$(now)")s; KUBECONFIG=$host_kubeconfig"
}

# Sends SIGTERM to the given PIDs, waits up to $1 seconds, then SIGKILLs what is left.
terminate() {
	local wait="$1" pid
	shift
	(($#)) || return 0
	kill -TERM "$@" 2>/dev/null || true
	for _ in $(seq $((wait * 5))); do
		local remaining=0
		for pid in "$@"; do
			alive "$pid" && remaining=1
		done
		((remaining)) || return 0
		sleep 0.2
	done
	for pid in "$@"; do
		if alive "$pid"; then
			log "pid $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-60)) survived SIGTERM; killing it"
			kill -KILL "$pid" 2>/dev/null || true
		fi
	done
}

down() {
	[[ $(id -u) -eq 0 ]] || die "the node needs root"
	local t0 pid h d
	t0="$(now)"
	# The supervisor stops the components in order; then everything left in the node's cgroup
	# (containers, shims, the host's API bridge) goes.
	local workers=() f
	for f in "$pids"/node-*.pid; do
		[[ -e "$f" ]] || continue
		pid="$(cat "$f" 2>/dev/null || true)"
		! { alive "$pid" && ours "$pid"; } || workers+=("$pid")
	done
	terminate 10 "${workers[@]}"
	pid="$(pid_of supervisor)"
	if alive "$pid" && ours "$pid"; then
		terminate 20 "$pid"
	fi
	pid="$(pid_of host-api-bridge)"
	if alive "$pid" && ours "$pid"; then
		terminate 5 "$pid"
	fi
	local t1 t2 t3
	t1="$(now)"
	# What is left are containers and their shims, whose state is thrown away with the node:
	# no need for a grace period.
	local rest
	for _ in $(seq 50); do
		mapfile -t rest < <(node_cgroup_pids)
		((${#rest[@]})) || break
		kill -KILL "${rest[@]}" 2>/dev/null || true
		sleep 0.2
	done
	((${#rest[@]} == 0)) || log "processes left in the node's cgroup: ${rest[*]}"
	t2="$(now)"

	# Cgroups, deepest first (they can be removed once their processes are gone).
	while read -r h; do
		[[ -d "$h$NODE_CGROUP" ]] || continue
		for _ in $(seq 25); do
			find "$h$NODE_CGROUP" -depth -type d -exec rmdir {} \; 2>/dev/null || true
			[[ -d "$h$NODE_CGROUP" ]] || break
			sleep 0.2
		done
		[[ ! -d "$h$NODE_CGROUP" ]] || log "could not remove cgroup $h$NODE_CGROUP"
	done < <(cgroup_mounts)

	t3="$(now)"
	local ns
	for ns in /run/netns/"$NODE_NETNS"-[0-9]*; do
		[[ ! -e "$ns" ]] || ip netns delete "${ns##*/}"
	done
	if [[ -e "$netns_path" ]]; then
		ip netns delete "$NODE_NETNS"
	fi
	# `ip netns add` made /run/netns a mount point; undo it if it did not exist before.
	if [[ -f "$NODE_STATE/created-run-netns" && -d /run/netns ]] &&
		[[ -z "$(ls -A /run/netns)" ]]; then
		umount /run/netns 2>/dev/null || true
		rmdir /run/netns 2>/dev/null || true
	fi
	if [[ -f "$NODE_STATE/created-dirs" ]]; then
		while read -r d; do
			rmdir "$d" 2>/dev/null || log "could not remove $d (not empty?)"
		done <"$NODE_STATE/created-dirs"
	fi

	# All the node's mounts lived in its own mount namespace; refuse to delete through a
	# mount that somehow reached the host.
	local mounts
	mounts="$(awk -v s="$NODE_STATE" 'index($5, s) == 1 { print $5 }' /proc/self/mountinfo)"
	if [[ -n "$mounts" ]]; then
		log "unmounting what is mounted under $NODE_STATE on the host: $mounts"
		sort -r <<<"$mounts" | xargs -r -n1 umount -l
	fi
	if [[ -e "$NODE_STATE" ]]; then
		rm -rf --one-file-system "$NODE_STATE"
	fi
	log "down in $(elapsed "$t0" "$(now)")s (components $(elapsed "$t0" "$t1")s," \
		"containers $(elapsed "$t1" "$t2")s, cgroups $(elapsed "$t2" "$t3")s)"
}

status() {
	if ! is_up; then
		echo "down"
		[[ ! -e "$NODE_STATE" ]] || echo "(state left in $NODE_STATE: run '$0 down')"
		return 3
	fi
	find_binaries
	echo "up: netns $NODE_NETNS, node $NODE_NAME ($NODE_IP), API https://127.0.0.1:$API_HOST_PORT"
	local c pid
	for c in supervisor host-api-bridge "${components[@]}"; do
		pid="$(pid_of "$c")"
		if alive "$pid"; then
			printf '  %-24s pid %-8s rss %6s MiB\n' "$c" "$pid" \
				$(($(ps -o rss= -p "$pid") / 1024))
		else
			printf '  %-24s not running\n' "$c"
		fi
	done
	local k n
	n="$(node_count)"
	for ((k = 1; k <= n; k++)); do
		local state=on
		if ((k > 1)); then
			if ! alive "$(cat "$pids/node-$k.pid" 2>/dev/null)"; then
				state="supervisor gone"
			elif ! alive "$(cat "$(node_state "$k")/pids/kubelet.pid" 2>/dev/null)"; then
				state=stopped
			fi
		fi
		if node_ready "$(node_name "$k")"; then
			echo "  node $(node_name "$k") ($(node_ip "$k"), $(node_netns "$k")): Ready, $state"
		else
			echo "  node $(node_name "$k") ($(node_ip "$k"), $(node_netns "$k")): not Ready, $state"
		fi
	done
}

### Chaos: nodes stopped and started, traffic cut and healed ###

# Fails unless $1 names a node of the running cluster other than node 1 (which holds the
# control plane); prints its number. A node is named by its number or its name.
worker_number() {
	local k
	k="$(node_number "$1")" || die "no node $1 (nodes: 1..$(node_count), or their names)"
	((k > 1)) || die "node $1 holds the control plane and cannot be stopped; stop another"
	echo "$k"
}

# The number of the node $1 names (its number or its name); fails when none does.
node_number() {
	local k
	for ((k = 1; k <= $(node_count); k++)); do
		if [[ "$1" == "$k" || "$1" == "$(node_name "$k")" ]]; then
			echo "$k"
			return 0
		fi
	done
	return 1
}

# `node stop K`: node K stops as if its power went: its link goes down (its address and its pods' stop
# answering, as for a machine that is off, not refusing), then every process of it is killed.
# `node start K`: it boots again: link up, containerd, kubelet and kube-proxy started; its pods
# come back as the kubelet restarts them.
node_verb() {
	is_up || die "the node is down"
	local verb="$1" k pid
	k="$(worker_number "${2:-}")"
	pid="$(cat "$pids/node-$k.pid" 2>/dev/null || true)"
	{ alive "$pid" && ours "$pid"; } || die "node $k's supervisor is not running; see $logs/node-$k.log"
	case "$verb" in
	stop)
		ip -n "$NODE_NETNS" link set "$(node_link "$k")" down
		kill -USR1 "$pid"
		local deadline=$((SECONDS + 30))
		until [[ -e "$(node_state "$k")/pids/off" ]]; do
			((SECONDS < deadline)) || die "node $k did not stop within 30s; see $logs/node-$k.log"
			sleep 0.2
		done
		log "node $(node_name "$k") stopped"
		;;
	start)
		ip -n "$NODE_NETNS" link set "$(node_link "$k")" up
		kill -USR2 "$pid"
		local deadline=$((SECONDS + 30))
		until alive "$(cat "$(node_state "$k")/pids/kubelet.pid" 2>/dev/null)"; do
			((SECONDS < deadline)) || die "node $k did not start within 30s; see $logs/node-$k.log"
			sleep 0.2
		done
		log "node $(node_name "$k") started (its kubelet runs; it reports Ready on its own)"
		;;
	*) die "usage: $0 node stop|start NODE" ;;
	esac
}

# The addresses of $1: a node (number or name: its address and its pods' range) or an IPv4
# address (a pod's).
addresses_of() {
	local k
	if k="$(node_number "$1")"; then
		echo "$(node_ip "$k")/32 $(node_pod_cidr "$k")"
		return
	fi
	[[ "$1" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "$1 is neither a node nor an IPv4 address"
	echo "$1/32"
}

# `cut A B`: every packet between A and B is dropped, both ways, in every node (ahead of
# kube-proxy's rules, established connections included), until `heal`. A and B are nodes or pod
# addresses. The API server and the cluster DNS on node 1 stay reachable from every node, and
# the API server still reaches every kubelet (exec, logs), as a control plane that sits apart
# from the split would; pods on node 1 (the operator) are cut like any other.
cut_traffic() {
	is_up || die "the node is down"
	[[ -n "${1:-}" && -n "${2:-}" ]] || die "usage: $0 cut A B (nodes or pod addresses)"
	local a b x y chain=BULWARK-CUT n k
	a="$(addresses_of "$1")" b="$(addresses_of "$2")"
	[[ "$a" != "$b" ]] || die "cut: $1 and $2 are the same"
	n="$(node_count)"
	for ((k = 1; k <= n; k++)); do
		local ipt=(ip netns exec "$(node_netns "$k")" iptables -w)
		if ! "${ipt[@]}" -nL "$chain" >/dev/null 2>&1; then
			"${ipt[@]}" -N "$chain"
			"${ipt[@]}" -A "$chain" -d "$NODE_IP" -p tcp --dport "$API_PORT" -j RETURN
			"${ipt[@]}" -A "$chain" -s "$NODE_IP" -p tcp --sport "$API_PORT" -j RETURN
			"${ipt[@]}" -A "$chain" -d "$NODE_IP" -p udp --dport 53 -j RETURN
			"${ipt[@]}" -A "$chain" -s "$NODE_IP" -p udp --sport 53 -j RETURN
			"${ipt[@]}" -A "$chain" -d "$NODE_IP" -p tcp --dport 53 -j RETURN
			"${ipt[@]}" -A "$chain" -s "$NODE_IP" -p tcp --sport 53 -j RETURN
			# The API server's own calls to kubelets (exec, logs) of the cut nodes.
			"${ipt[@]}" -A "$chain" -s "$NODE_IP" -p tcp --dport 10250 -j RETURN
			"${ipt[@]}" -A "$chain" -d "$NODE_IP" -p tcp --sport 10250 -j RETURN
			for x in INPUT FORWARD OUTPUT; do
				"${ipt[@]}" -I "$x" 1 -j "$chain"
			done
		fi
		for x in $a; do
			for y in $b; do
				"${ipt[@]}" -A "$chain" -s "$x" -d "$y" -j DROP
				"${ipt[@]}" -A "$chain" -s "$y" -d "$x" -j DROP
			done
		done
	done
	log "cut $1 from $2"
}

# `heal`: every cut is undone.
heal_traffic() {
	is_up || die "the node is down"
	local n k x chain=BULWARK-CUT
	n="$(node_count)"
	for ((k = 1; k <= n; k++)); do
		local ipt=(ip netns exec "$(node_netns "$k")" iptables -w)
		"${ipt[@]}" -nL "$chain" >/dev/null 2>&1 || continue
		for x in INPUT FORWARD OUTPUT; do
			while "${ipt[@]}" -D "$x" -j "$chain" 2>/dev/null; do :; done
		done
		"${ipt[@]}" -F "$chain"
		"${ipt[@]}" -X "$chain"
	done
	log "healed: no cut left"
}

print_env() {
	find_binaries
	cat <<-EOF
		export KUBECONFIG=$host_kubeconfig
		export BULWARK_NODE_NETNS=$NODE_NETNS
		export BULWARK_NODE_IP=$NODE_IP
		export BULWARK_NODE_STATE=$NODE_STATE
		export BULWARK_NODE_INNER_KUBECONFIG=$inner_kubeconfig
		export BULWARK_NODE_CONTAINERD_SOCKET=$containerd_sock
		export BULWARK_NODE_COUNT=$(node_count)
		export BULWARK_NODE_CONTAINERD_SOCKETS="$(for ((k = 1; k <= $(node_count); k++)); do printf '%s ' "$(node_sock "$k")"; done)"
		export BULWARK_NODE_BIN=$NODE_BIN
		export BULWARK_CONTROLPLANE_BIN=$CP_BIN
		export PATH=$NODE_BIN:\$PATH
	EOF
}

case "${1:-}" in
up) up ;;
down) down ;;
status) status ;;
env) print_env ;;
node) node_verb "${2:-}" "${3:-}" ;;
cut) cut_traffic "${2:-}" "${3:-}" ;;
heal) heal_traffic ;;
__inner) inner ;;
__worker) worker "$2" ;;
*) die "usage: $0 up | down | status | env | node stop|start NODE | cut A B | heal" ;;
esac
