#!/usr/bin/env bash
# `make e2e-smoke`: proves the harness, not the product: API server healthy, node Ready,
# a pod from the locally built image Running (no pull), a Service with endpoints that
# answers through kube-proxy from the host and from a pod, cluster DNS for cluster names
# only, exec and logs through the kubelet.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
ns=e2e-smoke
trap 'kubectl delete namespace $ns --wait=false >/dev/null 2>&1 || true' EXIT
ok() { log "ok: $*"; }

[[ $(kubectl get --raw /readyz) == ok ]] || die "apiserver not ready"
ok "apiserver /readyz"
kubectl wait --for=condition=Ready "node/$NODE_NAME" --timeout=30s >/dev/null
ok "node $NODE_NAME Ready"

kubectl create namespace $ns --dry-run=client -o yaml | kubectl apply -f - >/dev/null
wait_for 30 "ServiceAccount $ns/default" kubectl -n $ns get serviceaccount default
kubectl -n $ns apply -f - >/dev/null <<EOT
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  containers:
  - name: web
    image: $IMAGE
    imagePullPolicy: Never
    command: [python3, -m, http.server, "8080"]
    securityContext: {runAsNonRoot: true, allowPrivilegeEscalation: false}
    readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 1}
  # Outside names are refused: fail those lookups fast.
  dnsConfig: {options: [{name: timeout, value: "1"}, {name: attempts, value: "1"}]}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
EOT
kubectl -n $ns wait --for=condition=Ready pod/web --timeout=90s >/dev/null
[[ $(kubectl -n $ns get pod web -o jsonpath='{.status.phase}') == Running ]] || die "pod web not Running"
ok "pod from $IMAGE Running and Ready"
wait_for 30 "endpoints of service web" \
  bash -c "kubectl -n $ns get endpointslices -l kubernetes.io/service-name=web -o jsonpath='{.items[*].endpoints[*].addresses[*]}' | grep -q ."
ok "service web has endpoints: $(kubectl -n $ns get endpointslices -l kubernetes.io/service-name=web -o jsonpath='{.items[*].endpoints[*].addresses[*]}')"

svc_ip=$(kubectl -n $ns get service web -o jsonpath='{.spec.clusterIP}')
wait_for 30 "http://$svc_ip from the host" curl -sf --max-time 2 "http://$svc_ip/"
ok "service answers from the host via kube-proxy ($svc_ip)"
user=$(kubectl -n $ns exec web -- id -un)
[[ $user == coordinated ]] || die "container runs as '$user', expected coordinated"
ok "exec works; the container runs as $user"
kubectl -n $ns exec web -- python3 -c "import urllib.request as u; u.urlopen('http://$svc_ip/', timeout=3)"
ok "service answers from a pod (hairpin through the bridge)"
kubectl -n $ns exec web -- python3 -c \
  "import urllib.request as u; u.urlopen('http://web.$ns.svc.cluster.local/', timeout=3)"
ok "cluster DNS resolves the service name"
kubectl -n $ns exec web -- python3 -c "import socket; socket.getaddrinfo('example.com', 80)" 2>/dev/null &&
  die "an outside name resolved: cluster DNS must not forward"
ok "outside names do not resolve (nothing is forwarded)"
[[ $(kubectl -n $ns logs web) == *'"GET / HTTP'* ]] || die "no request in the pod's logs"
ok "logs through the kubelet"
kubectl -n $ns exec web -- coordinated --help >/dev/null
ok "the coordinated CLI runs in the image"
log "smoke passed"
