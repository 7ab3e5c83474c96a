#!/usr/bin/env bash
# Smoke test of the test node: brings it up (unless it is up), imports the local images and
# checks, from those images only:
#   - a pod resolves a Service name through CoreDNS and connects to its ClusterIP, backed by
#     another pod;
#   - a PersistentVolumeClaim binds through local-path and a pod writes to it;
#   - the MariaDB image initialises a datadir on a local-path volume as uid 999 (the way the
#     operator runs it) with MARIADB_ROOT_PASSWORD_FILE from a Secret, and another pod runs
#     `mariadb -e 'select 1'` through its Service; the mysqld-exporter image, given the 0.15+
#     flags, reports mysql_up 1;
#   - a pod cannot reach an outside address: connecting to 192.0.2.1:80 (TEST-NET-1, never
#     routed) fails at once with "network is unreachable".
# Then it takes the node down, brings three nodes up from the warm caches, stops and starts
# node 3 and takes them down again (skip that with SMOKE_WARM=0), and checks the host is clean:
# no process of any node, no network namespace, no mount, no cgroup, no state, host sysctls
# unchanged.
# Prints timings (bring-up cold and warm, image build and import, pod readiness, teardown) and
# the resident memory of the node's components.
set -euo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

node="$node_dir/node.sh"
ns=smoke
timings=()

log() { echo "smoke: $*" >&2; }
fail() {
	log "FAILED: $*"
	exit 1
}
timing() {
	timings+=("$(printf '%-44s %6ss' "$1" "$2")")
	log "$1: $2s"
}

# Host state that must be the same afterwards.
host_sysctls() {
	local f
	for f in kernel/panic kernel/panic_on_oops vm/overcommit_memory vm/panic_on_oom \
		kernel/keys/root_maxkeys kernel/keys/root_maxbytes net/ipv4/ip_forward \
		net/netfilter/nf_conntrack_max; do
		[[ -e "/proc/sys/$f" ]] && echo "$f=$(cat "/proc/sys/$f")"
	done
}
sysctls_before="$(host_sysctls)"
run_netns_before="$([[ -d /run/netns ]] && echo present || echo absent)"

we_brought_up=0
cleanup() {
	local rc=$?
	if ((we_brought_up)) && [[ -e "$NODE_STATE" ]]; then
		if ((rc)); then
			log "failure: pods in $ns:"
			kubectl get pods -n "$ns" -o wide >&2 2>/dev/null || true
			kubectl get events -n "$ns" --sort-by=.lastTimestamp 2>/dev/null | tail -n 20 >&2 || true
		fi
		"$node" down || true
	fi
	exit "$rc"
}
trap cleanup EXIT

# --- bring-up ---
t="$(now)"
if "$node" status >/dev/null 2>&1; then
	log "the node is already up: using it (no cold bring-up timing)"
else
	we_brought_up=1
	"$node" up
	timing "bring-up (binaries already built)" "$(elapsed "$t" "$(now)")"
fi
t="$(now)"
"$node" up 2>&1 | grep -q 'already up' || fail "a second 'up' did not say the node is already up"
timing "'up' on a node that is up" "$(elapsed "$t" "$(now)")"
eval "$("$node" env)"

t="$(now)"
"$node_dir/images.sh" build >/dev/null
timing "image archives (build or cache)" "$(elapsed "$t" "$(now)")"
t="$(now)"
"$node_dir/images.sh" import
timing "image import into containerd" "$(elapsed "$t" "$(now)")"

# --- workloads ---
kubectl create namespace "$ns" >/dev/null
kubectl create secret generic mariadb-root -n "$ns" --from-literal=password='s3cret-P@ss' >/dev/null
kubectl apply -n "$ns" -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: echo, labels: {app: echo}}
spec:
  containers:
  - name: echo
    image: $BASE_IMAGE
    imagePullPolicy: Never
    command: [perl, -MIO::Socket::INET, -e]
    args:
    - |
      my \$s = IO::Socket::INET->new(LocalPort => 8080, Listen => 16, ReuseAddr => 1) or die;
      while (my \$c = \$s->accept) { print \$c "hello from echo\n"; close \$c }
    readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: echo}
spec:
  selector: {app: echo}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: client, image: $BASE_IMAGE, imagePullPolicy: Never, command: [sleep, infinity]}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 16Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: volume-user}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: writer
    image: $BASE_IMAGE
    imagePullPolicy: Never
    command: [sh, -c, 'echo written > /data/file && sleep infinity']
    volumeMounts: [{name: data, mountPath: /data}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: mariadb-data}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 256Mi}}
---
# Run like the operator runs the server: uid/gid 999, no capabilities, datadir on a subPath.
apiVersion: v1
kind: Pod
metadata: {name: mariadb, labels: {app: mariadb}}
spec:
  securityContext: {runAsUser: 999, runAsGroup: 999, fsGroup: 999, runAsNonRoot: true}
  containers:
  - name: mariadb
    image: $MARIADB_IMAGE
    imagePullPolicy: Never
    env: [{name: MARIADB_ROOT_PASSWORD_FILE, value: /etc/mariadb-root/password}]
    ports: [{containerPort: 3306}]
    readinessProbe: {tcpSocket: {port: 3306}, periodSeconds: 1}
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
    volumeMounts:
    - {name: data, mountPath: /var/lib/mysql, subPath: mysql}
    - {name: root, mountPath: /etc/mariadb-root, readOnly: true}
    - {name: conf, mountPath: /etc/mysql/conf.d, readOnly: true}
    - {name: run, mountPath: /run/mysqld}
    - {name: tmp, mountPath: /tmp}
  - name: exporter
    image: $EXPORTER_IMAGE
    imagePullPolicy: Never
    args: [--mysqld.address=127.0.0.1:3306, --mysqld.username=root]
    env:
    - name: MYSQLD_EXPORTER_PASSWORD
      valueFrom: {secretKeyRef: {name: mariadb-root, key: password}}
    ports: [{containerPort: 9104}]
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
  volumes:
  - {name: data, persistentVolumeClaim: {claimName: mariadb-data}}
  - {name: root, secret: {secretName: mariadb-root}}
  - {name: conf, configMap: {name: mariadb-conf}}
  - {name: run, emptyDir: {}}
  - {name: tmp, emptyDir: {}}
---
# Options in /etc/mysql/conf.d are read (last), as deployments expect of the official image.
apiVersion: v1
kind: ConfigMap
metadata: {name: mariadb-conf}
data:
  bulwark.cnf: |
    [mariadb]
    max_connections = 77
---
# The official image's other way: started as root with a plain password variable.
apiVersion: v1
kind: Pod
metadata: {name: mariadb-as-root}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: mariadb
    image: $MARIADB_IMAGE
    imagePullPolicy: Never
    env: [{name: MARIADB_ROOT_PASSWORD, value: plain-pass}]
    readinessProbe: {tcpSocket: {port: 3306}, periodSeconds: 1}
    volumeMounts: [{name: data, mountPath: /var/lib/mysql}]
  volumes: [{name: data, emptyDir: {}}]
---
apiVersion: v1
kind: Service
metadata: {name: mariadb}
spec:
  selector: {app: mariadb}
  ports: [{name: mysql, port: 3306}, {name: metrics, port: 9104}]
---
apiVersion: v1
kind: Pod
metadata: {name: mariadb-client}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: client
    image: $MARIADB_IMAGE
    imagePullPolicy: Never
    command: [sleep, infinity]
    volumeMounts: [{name: root, mountPath: /etc/mariadb-root, readOnly: true}]
  volumes: [{name: root, secret: {secretName: mariadb-root}}]
EOF

# Seconds from a pod's creation to its Ready condition, from the API's timestamps.
ready_seconds() {
	kubectl get pod -n "$ns" "$1" -o jsonpath='{.metadata.creationTimestamp} {.status.conditions[?(@.type=="Ready")].lastTransitionTime}' |
		{
			read -r created ready
			echo $(($(date -d "$ready" +%s) - $(date -d "$created" +%s)))
		}
}
for pod in echo client volume-user mariadb-client mariadb mariadb-as-root; do
	kubectl wait -n "$ns" --for=condition=Ready "pod/$pod" --timeout=180s >/dev/null ||
		fail "pod $pod did not become Ready"
	timing "pod $pod Ready after creation" "$(ready_seconds "$pod")"
done

# Runs a command in a pod: in_pod POD [-c CONTAINER] COMMAND...
in_pod() {
	local pod="$1"
	shift
	if [[ "$1" == -c ]]; then
		kubectl exec -n "$ns" "$pod" -c "$2" -- "${@:3}"
	else
		kubectl exec -n "$ns" "$pod" -- "$@"
	fi
}

# DNS through CoreDNS, then the ClusterIP, by name.
addr="$(in_pod client getent hosts "echo.$ns.svc.$CLUSTER_DOMAIN" | awk '{ print $1 }')"
[[ "$addr" == "$(kubectl get svc -n "$ns" echo -o jsonpath='{.spec.clusterIP}')" ]] ||
	fail "echo.$ns.svc.$CLUSTER_DOMAIN resolved to '$addr', not the Service's ClusterIP"
reply="$(in_pod client bash -c 'exec 3<>/dev/tcp/echo/80 && timeout 5 cat <&3')"
[[ "$reply" == "hello from echo" ]] || fail "the echo Service answered '$reply'"
log "ok: Service name resolved by CoreDNS ($addr) and reached through its ClusterIP"

[[ "$(kubectl get pvc -n "$ns" data -o jsonpath='{.status.phase}')" == Bound ]] || fail "PVC data is not Bound"
[[ "$(in_pod volume-user cat /data/file)" == written ]] || fail "the volume-user pod could not write its volume"
log "ok: PVC bound through local-path ($(kubectl get pvc -n "$ns" data -o jsonpath='{.spec.volumeName}')) and written"

# MariaDB through its Service; the password comes from the Secret in both pods.
out=""
for _ in $(seq 60); do
	# shellcheck disable=SC2016 # expanded in the pod
	if out="$(in_pod mariadb-client sh -c \
		'MYSQL_PWD="$(cat /etc/mariadb-root/password)" mariadb -h mariadb -uroot -N -e "select 1"' 2>&1)" &&
		[[ "$out" == 1 ]]; then
		break
	fi
	sleep 1
done
[[ "$out" == 1 ]] || fail "mariadb -e 'select 1' through the Service answered: $out"
log "ok: MariaDB (uid $(in_pod mariadb -c mariadb id -u), datadir on local-path) answered select 1 through its Service"
# shellcheck disable=SC2016 # expanded in the pod
out="$(in_pod mariadb-client sh -c \
	'MYSQL_PWD="$(cat /etc/mariadb-root/password)" mariadb -h mariadb -uroot -N -e "select @@max_connections"')"
[[ "$out" == 77 ]] || fail "the option file in /etc/mysql/conf.d was not applied (max_connections=$out)"
log "ok: MariaDB read its options from /etc/mysql/conf.d"
out="$(in_pod mariadb-as-root sh -c 'MYSQL_PWD=plain-pass mariadb -h 127.0.0.1 -uroot -N -e "select 1" &&
	stat -c %U /var/lib/mysql/mysql')"
[[ "$out" == $'1\nmysql' ]] || fail "MariaDB started as root answered: $out"
log "ok: MariaDB started as root initialised its datadir as mysql, with MARIADB_ROOT_PASSWORD"
metrics="$(in_pod client bash -c 'exec 3<>/dev/tcp/mariadb/9104 &&
	printf "GET /metrics HTTP/1.0\r\n\r\n" >&3 && timeout 5 cat <&3' | grep '^mysql_up ' || true)"
[[ "$metrics" == "mysql_up 1" ]] || fail "mysqld-exporter reported '$metrics'"
log "ok: mysqld-exporter (0.14 behind the 0.15-flag wrapper) reports mysql_up 1"

# Nothing leaves the namespace: the node has no default route.
t="$(now)"
if err="$(in_pod client timeout 10 bash -c 'exec 3<>/dev/tcp/192.0.2.1/80' 2>&1)"; then
	fail "a pod connected to 192.0.2.1:80"
fi
took="$(elapsed "$t" "$(now)")"
grep -qi 'network is unreachable' <<<"$err" || fail "connecting to 192.0.2.1:80 failed otherwise: $err"
log "ok: a pod cannot reach outside the node: '$(grep -io 'network is unreachable' <<<"$err" | head -n1)' (exec round trip ${took}s)"

# --- memory ---
mem_report=()
total=0
for c in etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy \
	coredns local-path-provisioner api-bridge; do
	pid="$(cat "$NODE_STATE/pids/$c.pid")"
	rss=$(($(ps -o rss= -p "$pid") / 1024))
	total=$((total + rss))
	mem_report+=("$(printf '  %-24s %5s MiB' "$c" "$rss")")
done
shims=0
nshims=0
node_pids_before_down="$(find /sys/fs/cgroup/pids"$NODE_CGROUP" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -un | tr '\n' ' ')"
for pid in $node_pids_before_down; do
	[[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == containerd-shim* ]] || continue
	shims=$((shims + $(ps -o rss= -p "$pid") / 1024))
	nshims=$((nshims + 1))
done

# --- teardown, warm bring-up ---
t="$(now)"
"$node" down
timing "teardown" "$(elapsed "$t" "$(now)")"
if [[ "${SMOKE_WARM:-1}" == 1 ]]; then
	we_brought_up=1
	# Warm, with three nodes: their namespaces, mounts and cgroups must go with `down` too,
	# after a node was stopped and started again.
	t="$(now)"
	BULWARK_NODE_COUNT=3 "$node" up
	timing "bring-up of three nodes, warm" "$(elapsed "$t" "$(now)")"
	t="$(now)"
	for sock in $(eval "$("$node" env)" && echo "$BULWARK_NODE_CONTAINERD_SOCKETS"); do
		"$node_dir/images.sh" import "$sock"
	done
	timing "image import into three nodes' containerd, warm" "$(elapsed "$t" "$(now)")"
	# Across nodes: a Service on node 3 reached from a pod on node 2; nothing out of node 2.
	kubectl create namespace "$ns" >/dev/null
	kubectl apply -n "$ns" -f - >/dev/null <<-EOF
		apiVersion: v1
		kind: Pod
		metadata: {name: echo, labels: {app: echo}}
		spec:
		  nodeName: $NODE_NAME-3
		  containers:
		  - name: echo
		    image: $BASE_IMAGE
		    imagePullPolicy: Never
		    command: [perl, -MIO::Socket::INET, -e]
		    args: ['my \$s = IO::Socket::INET->new(LocalPort => 8080, Listen => 16, ReuseAddr => 1) or die; while (my \$c = \$s->accept) { print \$c "hello from echo\\n"; close \$c }']
		    readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
		---
		apiVersion: v1
		kind: Service
		metadata: {name: echo}
		spec:
		  selector: {app: echo}
		  ports: [{port: 80, targetPort: 8080}]
		---
		apiVersion: v1
		kind: Pod
		metadata: {name: client}
		spec:
		  nodeName: $NODE_NAME-2
		  terminationGracePeriodSeconds: 1
		  containers:
		  - {name: client, image: $BASE_IMAGE, imagePullPolicy: Never, command: [sleep, infinity]}
	EOF
	for pod in echo client; do
		kubectl wait -n "$ns" --for=condition=Ready "pod/$pod" --timeout=120s >/dev/null ||
			fail "pod $pod did not become Ready on its node"
	done
	echo_ip="$(kubectl get pod -n "$ns" echo -o jsonpath='{.status.podIP}')"
	reach() { in_pod client timeout 4 bash -c "exec 3<>/dev/tcp/$1/$2 && timeout 3 cat <&3" 2>/dev/null; }
	[[ "$(reach echo 80)" == "hello from echo" ]] || fail "node 2 did not reach node 3's pod through its Service"
	if err="$(in_pod client timeout 10 bash -c 'exec 3<>/dev/tcp/192.0.2.1/80' 2>&1)"; then
		fail "a pod on node 2 connected to 192.0.2.1:80"
	fi
	grep -qi 'network is unreachable' <<<"$err" || fail "from node 2, 192.0.2.1:80 failed otherwise: $err"
	log "ok: node 2's pod reached node 3's through a Service, and nothing outside"
	# A cut drops the traffic between the nodes; heal restores it.
	"$node" cut 2 3
	! reach "$echo_ip" 8080 >/dev/null || fail "node 2 still reached node 3's pod after 'cut 2 3'"
	"$node" heal
	[[ "$(reach "$echo_ip" 8080)" == "hello from echo" ]] || fail "node 2 did not reach node 3's pod after 'heal'"
	log "ok: 'cut 2 3' dropped node 2's traffic to node 3's pod, 'heal' restored it"
	# A stopped node's processes are all gone but its supervisor's; started, it is Ready again
	# and its pod runs again.
	"$node" node stop 3
	left="$(find "/sys/fs/cgroup/pids$NODE_CGROUP/node-3" -path "*/node-3/supervisor" -prune -o \
		-name cgroup.procs -exec cat {} + 2>/dev/null | tr '\n' ' ')"
	[[ -z "${left// /}" ]] || fail "processes of node 3 left after 'node stop 3': $left"
	"$node" node start 3
	kubectl wait --for=condition=Ready "node/$NODE_NAME-3" --timeout=60s >/dev/null ||
		fail "node 3 not Ready after 'node start 3'"
	kubectl wait -n "$ns" --for=condition=Ready pod/echo --timeout=120s >/dev/null ||
		fail "node 3's pod did not run again after 'node start 3'"
	log "ok: 'node stop 3' killed every process of node 3; 'node start 3' brought it and its pod back"
	t="$(now)"
	"$node" down
	timing "teardown of three nodes" "$(elapsed "$t" "$(now)")"
fi
we_brought_up=0

# --- the host is clean ---
problems=()
for pid in $node_pids_before_down; do
	[[ -d "/proc/$pid" ]] && problems+=("process $pid of the node still runs: $(tr '\0' ' ' <"/proc/$pid/cmdline")")
done
# One name at a time: pgrep refuses patterns longer than a process name (15 characters), and
# those are the names as the kernel truncates them.
for name in kubelet containerd containerd-shim kube-apiserver kube-controller kube-scheduler \
	kube-proxy etcd coredns local-path-prov; do
	# A defunct entry runs nothing: it waits for a parent outside the node (one killed
	# beside the test) to collect it.
	left="$(pgrep -a -x "$name" | while read -r pid rest; do
		[[ "$(ps -o stat= -p "$pid" 2>/dev/null | tr -d " ")" == Z* ]] || echo "$pid $rest"
	done || true)"
	[[ -z "$left" ]] || problems+=("processes named $name left: $left")
done
ip netns list | grep -qw "$NODE_NETNS" && problems+=("network namespace $NODE_NETNS left")
grep -q "$NODE_STATE" /proc/self/mountinfo && problems+=("mounts under $NODE_STATE left")
grep -q bulwark /proc/self/mountinfo && problems+=("mounts with 'bulwark' left: $(grep bulwark /proc/self/mountinfo)")
[[ -e "$NODE_STATE" ]] && problems+=("$NODE_STATE left")
compgen -G "/sys/fs/cgroup/*$NODE_CGROUP" >/dev/null && problems+=("cgroups left: $(compgen -G "/sys/fs/cgroup/*$NODE_CGROUP")")
[[ "$(host_sysctls)" == "$sysctls_before" ]] || problems+=("host sysctls changed: $(diff <(echo "$sysctls_before") <(host_sysctls))")
[[ "$([[ -d /run/netns ]] && echo present || echo absent)" == "$run_netns_before" ]] ||
	problems+=("/run/netns was $run_netns_before before")
for d in /run/containerd /var/lib/cni /var/log/containers; do
	[[ -e "$d" ]] && problems+=("$d exists")
done
if ((${#problems[@]})); then
	printf 'smoke: host not clean: %s\n' "${problems[@]}" >&2
	exit 1
fi
log "ok: host clean (no node process, netns, mount, cgroup, state; sysctls unchanged)"

echo
echo "== timings"
printf '  %s\n' "${timings[@]}"
echo "== resident memory while the smoke workloads ran"
printf '%s\n' "${mem_report[@]}"
printf '  %-24s %5s MiB\n' "components total" "$total"
printf '  %-24s %5s MiB (%s shims)\n' "containerd shims" "$shims" "$nshims"
echo "smoke: PASSED"
