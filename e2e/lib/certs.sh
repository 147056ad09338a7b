#!/usr/bin/env bash
# Generates a throwaway CA, the component certificates and their kubeconfigs under
# $STATE/pki. Kept if present, so re-running up keeps the cluster's identity.
set -euo pipefail
source "$(dirname "$0")/common.sh"

pki="$STATE/pki"
[[ -f $pki/.done ]] && exit 0
rm -rf "$pki" && mkdir -p "$pki" && cd "$pki"
umask 077

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null; }
# The users' credential (admin.kubeconfig) is RSA: Java clients such as spark-submit's fabric8 read only RSA
# client keys from a kubeconfig ("Invalid DER: object is not integer" with an EC key).
rsa_key() { openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1.key" 2>/dev/null; }
# cert NAME SUBJECT EXTENSIONS: a CA-signed cert valid for a year.
cert() {
  if [[ $1 == admin ]]; then rsa_key "$1"; else key "$1"; fi
  openssl req -new -key "$1.key" -subj "$2" -out "$1.csr"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 \
    -extfile <(printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n%s\n' "$3") \
    -out "$1.crt" 2>/dev/null
  rm "$1.csr"
}
key ca
openssl req -x509 -new -key ca.key -subj /CN=coordinated-e2e-ca -days 365 -out ca.crt \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
client=extendedKeyUsage=clientAuth
cert apiserver /CN=kube-apiserver "extendedKeyUsage=serverAuth
subjectAltName=IP:$NODE_IP,IP:$APISERVER_SVC_IP,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client"
cert admin "/O=system:masters/CN=kubernetes-admin" "$client"
cert controller-manager /CN=system:kube-controller-manager "$client"
cert scheduler /CN=system:kube-scheduler "$client"
cert kube-proxy /CN=system:kube-proxy "$client"
cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" "$client"
# The NetworkPolicy enforcer; up.sh grants this user what it reads.
cert kube-network-policies /CN=coordinated-e2e:kube-network-policies "$client"
# The service-account token signing pair.
key sa && openssl pkey -in sa.key -pubout -out sa.pub

# One kubeconfig per identity, all talking to the apiserver on the bridge address.
for id in admin controller-manager scheduler kube-proxy kubelet kube-network-policies; do
  cat >"$id.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://$NODE_IP:6443
    certificate-authority-data: $(base64 -w0 ca.crt)
users:
- name: $id
  user:
    client-certificate-data: $(base64 -w0 "$id.crt")
    client-key-data: $(base64 -w0 "$id.key")
contexts:
- name: e2e
  context: {cluster: e2e, user: $id}
current-context: e2e
KC
done
touch .done
