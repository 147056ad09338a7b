# shellcheck shell=bash disable=SC2034  # sourced: the variables are used by the scripts
# Shared settings for the e2e harness. Sourced, never run.
# Pinned versions live here so every script agrees on them.
K8S_VERSION="${K8S_VERSION:-v1.33.13}"
E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO_DIR="$(cd "$E2E_DIR/.." && pwd)"
STATE="${E2E_STATE:-$E2E_DIR/.state}"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/coordinated-cluster"
K8S_BIN="$CACHE/kubernetes/$K8S_VERSION/bin"
COREDNS_VERSION=v1.14.7
COREDNS_BIN="$CACHE/coredns/$COREDNS_VERSION/coredns"
# The NetworkPolicy enforcer (e2e/lib/build-kube-network-policies.sh). The checksum database
# does not list this module, so its go.sum lines are pinned here instead.
KNP_VERSION=v0.8.0
KNP_SUMS="sigs.k8s.io/kube-network-policies $KNP_VERSION h1:dzecRNzdmg+VmHEQWTIjxnCgf412J+8CKHqbKgCiWkk=
sigs.k8s.io/kube-network-policies $KNP_VERSION/go.mod h1:QNAmb/exAiL032oNq0/QhfYl5H+jEFFDF0qVXpIOkeI="
KNP_BIN="$CACHE/kube-network-policies/$KNP_VERSION/kube-network-policies"
KNP_TABLE=kube-network-policies  # its nftables table (inet family), named by the controller
KNP_QUEUE=233                    # its nfqueue number, away from the default 100 other tools take
# The bridge is the node's only network: its address is the node IP (loopback is refused).
BRIDGE=cc-e2e0
NODE_IP=10.233.0.1
NODE_NAME=cc-e2e-node
POD_CIDR=10.233.0.0/24
SERVICE_CIDR=10.234.0.0/24
APISERVER_SVC_IP=10.234.0.1
# Pod DNS is CoreDNS on the bridge address: cluster names only, nothing forwarded. The
# kubelet's resolvConf (dnsPolicy Default) names an address nothing answers.
CLUSTER_DNS=$NODE_IP
NO_DNS=10.234.0.10
# release_version [CHECKOUT]: the release a checkout calls itself (default: this one); its image is
# coordinated-cluster:<it>. e2e/release.py is the one place that reads it.
release_version() { python3 "$E2E_DIR/release.py" version "${1:-$REPO_DIR}"; }
IMAGE_VERSION="$(release_version)"
IMAGE="coordinated-cluster:$IMAGE_VERSION"
PAUSE_IMAGE="localhost/coordinated-e2e/pause:1"
E2E_PROVISIONER=coordinated.dev/e2e-hostpath
CONTAINERD_SOCK="$STATE/containerd/containerd.sock"
# The S3-compatible object store beside the cluster (versitygw, scripts/install-tools.sh S3_SERVER): a host
# process on the bridge address, which pods reach; its data, key and the files the tests read are in $S3_STATE.
S3_PORT=29000
S3_ENDPOINT="http://$NODE_IP:$S3_PORT"
S3_STATE="$STATE/s3"
# /var/log/containers is hard-wired in the kubelet; the CNI result cache in go-cni.
HOST_PATHS=(/var/log/containers /var/lib/cni /run/netns)
for c in /sys/fs/cgroup/*/; do HOST_PATHS+=("${c}kubepods"); done
export KUBECONFIG="$STATE/kubeconfig"
PATH="$K8S_BIN:$CACHE/bin:$PATH"  # $CACHE/bin: helm, kubeconform (scripts/install-tools.sh)

log() { printf '[e2e %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
# wait_for SECONDS DESCRIPTION CMD...: poll CMD once a second, bounded.
wait_for() {
  local secs=$1 what=$2; shift 2
  for ((i = 0; i < secs; i++)); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
  die "timed out after ${secs}s waiting for $what"
}
# alive NAME: the process recorded in $STATE/pids/NAME.pid is running and is still ours:
# its command line names NAME and $STATE (a recycled PID must never be signalled).
alive() {
  local pid cmd
  pid=$(cat "$STATE/pids/$1.pid" 2>/dev/null) && [[ -n $pid ]] || return 1
  cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
  [[ $cmd == *"$1"* && $cmd == *"$STATE"* ]]
}
