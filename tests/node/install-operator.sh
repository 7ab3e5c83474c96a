#!/usr/bin/env bash
# Installs the operator from the Helm chart (charts/mysql-operator) on the running test node,
# with the locally built images, and waits until it is ready.
#
#   install-operator.sh [BINDIR]
#
# With BINDIR (a directory holding mysql-operator, mysql-backup and bulwark-agent, e.g.
# target/debug), first imports the node's base images (images.sh import) and builds and imports
# Bulwark's images (bulwark-images.sh import BINDIR). Without it, the images must already be in
# the node's containerd.
#
# Release `mysql-operator` in namespace bulwark-system (helm upgrade --install: rerunning it
# upgrades; with the same images and chart it changes nothing and the running operator stays,
# so that test binaries running at once can each call it; calls take turns), through the node's host kubeconfig (node.sh env). Images: the operator and backup
# images of bulwark-images.sh (BULWARK_OPERATOR_IMAGE, BULWARK_BACKUP_IMAGE), the exporter of
# images.sh; pullPolicy Never (nothing can be pulled). The pods the operator creates get no
# pullPolicy, which Kubernetes defaults to IfNotPresent for a tag other than `latest`.
#
# Waits (BULWARK_OPERATOR_TIMEOUT seconds, default 120) for the Deployment to be Available
# (its pod's readiness probe is /readyz) and checks /readyz once more through the API server's
# pod proxy; on failure prints the pod's state, the events and the operator's logs.
# Extra `helm` arguments: BULWARK_HELM_ARGS (e.g. "--set logLevel=debug").
set -euo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OPERATOR_IMAGE="${BULWARK_OPERATOR_IMAGE:-bulwark.local/mysql-operator:dev}"
BACKUP_IMAGE="${BULWARK_BACKUP_IMAGE:-bulwark.local/mysql-backup:dev}"
NAMESPACE=bulwark-system
RELEASE=mysql-operator
TIMEOUT="${BULWARK_OPERATOR_TIMEOUT:-120}"
repo_dir="$(cd "$node_dir/../.." && pwd)"

log() { echo "node/install-operator.sh: $*" >&2; }
die() {
	log "$*"
	exit 1
}

[[ "$("$node_dir/node.sh" status 2>/dev/null | head -n1)" != down ]] || die "the node is down: run tests/node/node.sh up"
eval "$("$node_dir/node.sh" env)"
# One install at a time: end-to-end binaries running at once each install at their start.
exec 8>"$NODE_STATE/install-operator.lock"
flock 8
helm_bin="$(bash "$repo_dir/tests/helm/build.sh")"
helm() { "$helm_bin/helm" "$@"; }

# The images' build key goes on the operator's pod template: a new build rolls the operator
# out (the tag stays `dev`), an unchanged one leaves the running operator alone. Without BINDIR
# the running operator's key is kept.
images_key="$(kubectl -n "$NAMESPACE" get "deploy/$RELEASE" \
	-o jsonpath='{.spec.template.metadata.annotations.bulwark\.dev/images}' 2>/dev/null || true)"
if [[ -n "${1:-}" ]]; then
	t0="$(now)"
	images_key="$(cat "$("$node_dir/bulwark-images.sh" build "$1")/stamp")"
	# Every node's containerd: nothing can be pulled, and a pod may land on any node.
	for sock in ${BULWARK_NODE_CONTAINERD_SOCKETS:-$BULWARK_NODE_CONTAINERD_SOCKET}; do
		"$node_dir/images.sh" import "$sock"
		"$node_dir/bulwark-images.sh" import "$1" "$sock"
	done
	log "images imported in $(elapsed "$t0" "$(now)")s"
fi
pod_annotations=()
if [[ -n "$images_key" ]]; then
	pod_annotations=(--set-string "podAnnotations.bulwark\\.dev/images=$images_key")
fi

# Prints what explains a failure: the pods, their events, the operator's logs.
diagnose() {
	kubectl -n "$NAMESPACE" get deploy,rs,pods -o wide >&2 || true
	kubectl -n "$NAMESPACE" describe pods -l "app.kubernetes.io/instance=$RELEASE" 2>&1 | tail -n 40 >&2 || true
	kubectl -n "$NAMESPACE" get events --sort-by=.lastTimestamp 2>&1 | tail -n 20 >&2 || true
	log "operator logs:"
	kubectl -n "$NAMESPACE" logs "deploy/$RELEASE" --all-containers --tail=100 >&2 || true
	kubectl -n "$NAMESPACE" logs "deploy/$RELEASE" --all-containers --previous --tail=50 >&2 2>/dev/null || true
}

# With several nodes the operator stays on node 1, beside the control plane: the chaos verbs
# (node stop, cut) act on the others, so a test decides when the operator is cut off.
placement=()
if ((${BULWARK_NODE_COUNT:-1} > 1)); then
	placement=(--set-string "nodeSelector.kubernetes\\.io/hostname=$NODE_NAME")
fi

t0="$(now)"
existed=false
kubectl -n "$NAMESPACE" get "deploy/$RELEASE" >/dev/null 2>&1 && existed=true
# Helm installs a chart's CRDs once and never upgrades them: on a reused node, the CRDs of this
# tree are applied first (as an upgrade must do by hand).
if [[ "$existed" == true ]]; then
	kubectl apply --server-side --force-conflicts -f "$repo_dir/charts/mysql-operator/crds/" >/dev/null
fi
# The image built here has Debian's mariadb-backup 10.11 and no XtraBackup (PERCONA=false).
# shellcheck disable=SC2086 # BULWARK_HELM_ARGS is split on purpose
helm upgrade --install "$RELEASE" "$repo_dir/charts/mysql-operator" \
	--namespace "$NAMESPACE" --create-namespace \
	--set-string "image.repository=${OPERATOR_IMAGE%:*}" \
	--set-string "image.tag=${OPERATOR_IMAGE##*:}" \
	--set-string image.pullPolicy=Never \
	--set-string "backupImage.repository=${BACKUP_IMAGE%:*}" \
	--set-string "backupImage.tag=${BACKUP_IMAGE##*:}" \
	--set "backupImage.serves={mariadb-10.11}" \
	--set-string "exporterImage=$EXPORTER_IMAGE" \
	--set-string logFormat=text \
	"${placement[@]}" "${pod_annotations[@]}" \
	${BULWARK_HELM_ARGS:-} >/dev/null
log "helm upgrade --install done in $(elapsed "$t0" "$(now)")s"
if ! kubectl -n "$NAMESPACE" rollout status "deploy/$RELEASE" --timeout="${TIMEOUT}s" >/dev/null ||
	! kubectl -n "$NAMESPACE" wait --for=condition=Available "deploy/$RELEASE" --timeout=10s >/dev/null; then
	diagnose
	die "the operator did not become Available within ${TIMEOUT}s"
fi
pod="$(kubectl -n "$NAMESPACE" get pods -l "app.kubernetes.io/instance=$RELEASE" \
	--field-selector=status.phase=Running -o jsonpath='{.items[0].metadata.name}')"
if ! ready="$(kubectl get --raw "/api/v1/namespaces/$NAMESPACE/pods/$pod:8080/proxy/readyz" 2>&1)"; then
	diagnose
	die "/readyz of $pod failed: $ready"
fi
log "operator $pod ready ($ready) $(elapsed "$t0" "$(now)")s after helm install"
