#!/usr/bin/env bash
# A local Kubernetes with the operator installed, for people: the test node of tests/node (a
# real cluster of one or more nodes in network namespaces of their own, no route out), the operator installed
# from the Helm chart with images built here from the working tree.
#
#   scripts/dev-cluster.sh up [NODES]    # idempotent; prints the KUBECONFIG to export
#                                        # NODES: how many nodes (default 1; 3 for failover)
#   scripts/dev-cluster.sh status
#   scripts/dev-cluster.sh kubectl ARGS  # the bundled kubectl (the node's release) on it
#   scripts/dev-cluster.sh down          # removes everything it made
#
# Chaos, for failover by hand (nodes by number or name; node 1 holds the control plane):
#   scripts/dev-cluster.sh node stop 2   # node 2 stops: link down, then every process of it
#                                        # killed at once (its files stay)
#   scripts/dev-cluster.sh node start 2  # it starts again; its pods restart
#   scripts/dev-cluster.sh cut 2 3       # drop every packet between two nodes or pod addresses
#   scripts/dev-cluster.sh heal          # undo every cut
#
# Needs root and Debian (it installs containerd, runc, the CNI plugins, buildah and debootstrap
# from Debian, and builds the node's parts from the Go module proxy the first time). The API
# server is reachable from the host on 127.0.0.1 only. Only images built here run on it:
# MariaDB 10.11 (`docker.io/library/mariadb:10.11`), the operator and its backup image.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
node=tests/node/node.sh

log() { echo "dev-cluster: $*" >&2; }

kubeconfig() {
	sed -n 's/^export KUBECONFIG=//p' <<<"$(bash "$node" env)"
}

up() {
	[[ $(id -u) -eq 0 ]] || {
		log "needs root (containerd, network namespaces, mounts)"
		exit 1
	}
	bash scripts/install-test-deps.sh
	bash tests/node/install-deps.sh
	BULWARK_NODE_COUNT="${1:-${BULWARK_NODE_COUNT:-1}}" bash "$node" up
	log "building mysql-operator, mysql-backup and bulwark-agent"
	cargo build --locked -p mysql-operator -p mysql-backup -p bulwark-agent --bins
	local target
	target="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
	bash tests/node/install-operator.sh "$target/debug"
	local kc
	kc="$(kubeconfig)"
	cat <<-EOF

		The cluster is up, with the operator installed. Try:

		export KUBECONFIG=$kc
		alias kubectl='$ROOT/scripts/dev-cluster.sh kubectl'
		kubectl apply --server-side -f - <<'YAML'
		apiVersion: v1
		kind: PersistentVolumeClaim
		metadata: {name: dumps}
		spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 2Gi}}}
		---
		apiVersion: mysql.bulwark.dev/v1alpha1
		kind: MySQLCluster
		metadata: {name: demo}
		spec:
		  engine: mariadb
		  version: "10.11"
		  replicas: 3
		  storage: {size: 1Gi}
		  backup:
		    storages: [{name: shelf, pvc: {claimName: dumps}}]
		    schedules: [{name: hourly, schedule: "0 * * * *", storage: shelf, retention: {keepLast: 24}}]
		YAML
		kubectl get mysqlcluster demo -w          # Ready in about half a minute

		# a backup now, and watch it:
		kubectl apply --server-side -f - <<'YAML'
		apiVersion: mysql.bulwark.dev/v1alpha1
		kind: MySQLBackup
		metadata: {name: demo-now}
		spec: {clusterRef: {name: demo}, storage: shelf, method: physical}
		YAML
		kubectl get mysqlbackup demo-now -w

		Remove everything with: scripts/dev-cluster.sh down
	EOF
}

case "${1:-}" in
up) up "${2:-}" ;;
down) bash "$node" down ;;
status) bash "$node" status ;;
node | cut | heal) exec bash "$node" "$@" ;;
kubectl)
	shift
	eval "$(bash "$node" env)"
	exec "$BULWARK_NODE_BIN/kubectl" "$@"
	;;
*)
	log "usage: $0 up [NODES] | down | status | kubectl ARGS... | node stop|start NODE | cut A B | heal"
	exit 2
	;;
esac
