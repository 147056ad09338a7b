#!/usr/bin/env bash
# `make e2e-up`: a single-node Kubernetes on this machine, reachable with
# KUBECONFIG=e2e/.state/kubeconfig. Safe to re-run: a healthy cluster is left as is.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
lib="$E2E_DIR/lib"
t0=$SECONDS

"$lib/packages.sh"
"$lib/build-kubernetes.sh"
"$lib/build-coredns.sh"
"$lib/build-kube-network-policies.sh"
# helm and kubeconform for the suite, built with `go install` and cached by version
# (scripts/install-tools.sh is the one place that pins them). It has a K8S_VERSION of its own.
tools=$(env -u K8S_VERSION "$REPO_DIR/scripts/install-tools.sh")
S3_SERVER_BIN=$(sed -n 's/^S3_SERVER=//p' <<<"$tools")
mapfile -t images < <("$lib/image.sh")
# The previous release's image and chart, for the upgrade test (e2e/test_04_upgrade.py). Its image is imported
# only when it calls itself another release than this checkout: an image of the same name would replace ours.
previous=$("$lib/previous-release.sh")
previous_version=$(sed -n 's/^version=//p' <<<"$previous")
if [[ $previous_version != "$IMAGE_VERSION" ]]; then
  images+=("$(sed -n 's/^archive=//p' <<<"$previous")")
else
  log "the previous release calls itself $previous_version, as this checkout does: its image is not imported"
fi
t_build=$((SECONDS - t0))

# Imports each image archive once per cluster (the archive name carries its content key),
# so a re-run after a source change brings the new image into a running cluster.
import_images() {
  for img in "${images[@]}"; do
    grep -qxF "$(basename "$img")" "$STATE/images.imported" 2>/dev/null && continue
    log "importing $(basename "$img")"
    ctr --address "$CONTAINERD_SOCK" -n k8s.io images import "$img" >/dev/null
    basename "$img" >>"$STATE/images.imported"
  done
}

# The object store on the bridge address, with a key made for this cluster. The tests read the endpoint and the
# key from $S3_STATE (an AWS credentials file and an env file), never from the command line.
start_s3() {
  alive s3 && return 0
  mkdir -p "$S3_STATE/data"
  if [[ ! -s $S3_STATE/env ]]; then
    local id secret
    id="e2e-$(openssl rand -hex 6)" secret="$(openssl rand -hex 24)"
    (
      umask 077
      printf 'AWS_ACCESS_KEY_ID=%s\nAWS_SECRET_ACCESS_KEY=%s\n' "$id" "$secret" >"$S3_STATE/env"
      printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' "$id" "$secret" >"$S3_STATE/credentials"
    )
    echo "$S3_ENDPOINT" >"$S3_STATE/endpoint"
  fi
  (
    ROOT_ACCESS_KEY=$(sed -n 's/^AWS_ACCESS_KEY_ID=//p' "$S3_STATE/env")
    ROOT_SECRET_KEY=$(sed -n 's/^AWS_SECRET_ACCESS_KEY=//p' "$S3_STATE/env")
    export ROOT_ACCESS_KEY ROOT_SECRET_KEY
    setsid "$S3_SERVER_BIN" --port "$NODE_IP:$S3_PORT" --quiet posix "$S3_STATE/data" \
      >"$STATE/logs/s3.log" 2>&1 </dev/null &
    echo $! >"$STATE/pids/s3.pid"
  )
  wait_for 30 "the S3 server on $NODE_IP:$S3_PORT" bash -c "exec 3<>/dev/tcp/$NODE_IP/$S3_PORT"
}

if alive kubelet && kubectl get --raw /readyz >/dev/null 2>&1; then
  log "cluster already up"
  import_images
  start_s3
else
  # Whatever is left of an earlier, half-finished run goes first.
  [[ -d $STATE/pids ]] && "$E2E_DIR/down.sh"
  t1=$SECONDS
  mkdir -p "$STATE"
  ls /run/netns 2>/dev/null >"$STATE/netns.before" || true
  # Host paths the kubelet, containerd or CNI create outside $STATE: down.sh removes the
  # ones that did not exist before.
  for p in "${HOST_PATHS[@]}"; do [[ -e $p ]] || echo "$p"; done >"$STATE/host-paths.new"
  "$lib/network.sh" up
  "$lib/certs.sh"
  "$lib/configs.sh"
  cp "$STATE/pki/admin.kubeconfig" "$KUBECONFIG"
  pki="$STATE/pki"

  # start NAME CMD...: run detached (own session, so make's exit does not take it
  # along), log to $STATE/logs, record the PID for down.sh.
  start() {
    local name=$1; shift
    setsid "$@" >"$STATE/logs/$name.log" 2>&1 </dev/null &
    echo $! >"$STATE/pids/$name.pid"
  }

  # etcd on loopback ports of its own; the data is throwaway.
  start etcd etcd --name cc-e2e --data-dir "$STATE/etcd" \
    --listen-client-urls http://127.0.0.1:23790 --advertise-client-urls http://127.0.0.1:23790 \
    --listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
    --initial-cluster cc-e2e=http://127.0.0.1:23800
  start containerd containerd --config "$STATE/containerd/config.toml"
  wait_for 30 etcd curl -sf http://127.0.0.1:23790/health
  wait_for 30 containerd ctr --address "$CONTAINERD_SOCK" version

  t2=$SECONDS
  import_images
  t_import=$((SECONDS - t2)) t3=$SECONDS

  start kube-apiserver kube-apiserver --advertise-address "$NODE_IP" --bind-address "$NODE_IP" \
    --secure-port 6443 --etcd-servers http://127.0.0.1:23790 \
    --service-cluster-ip-range "$SERVICE_CIDR" --allow-privileged \
    --authorization-mode Node,RBAC --client-ca-file "$pki/ca.crt" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --kubelet-preferred-address-types InternalIP --profiling=false
  wait_for 90 "kube-apiserver /readyz" kubectl get --raw /readyz

  start kube-controller-manager kube-controller-manager --kubeconfig "$pki/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$pki/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$pki/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials \
    --service-cluster-ip-range "$SERVICE_CIDR" --root-ca-file "$pki/ca.crt" \
    --service-account-private-key-file "$pki/sa.key" \
    --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" --profiling=false
  start kube-scheduler kube-scheduler --kubeconfig "$pki/scheduler.kubeconfig" \
    --authentication-kubeconfig "$pki/scheduler.kubeconfig" --authorization-kubeconfig "$pki/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --profiling=false
  start kubelet kubelet --config "$STATE/kubelet/config.yaml" --kubeconfig "$pki/kubelet.kubeconfig" \
    --root-dir "$STATE/kubelet" --cert-dir "$STATE/kubelet/pki" \
    --node-ip "$NODE_IP" --hostname-override "$NODE_NAME"
  start kube-proxy kube-proxy --config "$STATE/kube-proxy.yaml"
  # NetworkPolicy enforcement, which the bridge CNI lacks: kube-network-policies on the node,
  # queueing pods' new connections to itself (nfqueue $KNP_QUEUE) from an nftables table of
  # its own, and dropping those its policies refuse. It reads pods, namespaces and policies.
  kubectl apply -f - >/dev/null <<EOT
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: coordinated-e2e:kube-network-policies}
rules:
- {apiGroups: [""], resources: [pods, namespaces, nodes], verbs: [get, list, watch]}
- {apiGroups: [networking.k8s.io], resources: [networkpolicies], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: coordinated-e2e:kube-network-policies}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: coordinated-e2e:kube-network-policies}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: coordinated-e2e:kube-network-policies}]
EOT
  start kube-network-policies "$KNP_BIN" --kubeconfig "$pki/kube-network-policies.kubeconfig" \
    --hostname-override "$NODE_NAME" --nfqueue-id "$KNP_QUEUE"
  # A default StorageClass with a provisioner, as kind has: StatefulSets need volumes. Like kind's, it cannot
  # expand a volume; "expandable" (the same provisioner, which then also resizes) can.
  kubectl apply -f - >/dev/null <<EOT
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: standard, annotations: {storageclass.kubernetes.io/is-default-class: "true"}}
provisioner: $E2E_PROVISIONER
reclaimPolicy: Delete
volumeBindingMode: Immediate
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: expandable}
provisioner: $E2E_PROVISIONER
reclaimPolicy: Delete
volumeBindingMode: Immediate
allowVolumeExpansion: true
EOT
  start provisioner "$lib/provisioner.sh" "$STATE"
  start coredns "$COREDNS_BIN" -conf "$STATE/Corefile" -dns.port 53
  start_s3

  wait_for 120 "node $NODE_NAME Ready" kubectl wait --for=condition=Ready "node/$NODE_NAME" --timeout=2s
  # Pods need the default ServiceAccount before they can be created.
  wait_for 60 "default ServiceAccount" kubectl get serviceaccount default
  wait_for 30 "cluster DNS" curl -sf http://127.0.0.1:18181/ready
  log "cluster Ready: ${t_build}s builds and checks, $((SECONDS - t1))s to Ready" \
    "(image import ${t_import}s, apiserver start to node Ready $((SECONDS - t3))s)"
fi
echo "$previous" >"$STATE/previous-release.env"  # what the upgrade test installs
for name in etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy \
  kube-network-policies provisioner coredns s3; do
  alive "$name" || die "$name is not running: see $STATE/logs/$name.log"
done
log "KUBECONFIG=$KUBECONFIG"
