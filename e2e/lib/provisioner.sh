#!/usr/bin/env bash
# A minimal dynamic volume provisioner for the StorageClasses "standard" (the default, as on
# kind) and "expandable": each pending claim gets a new hostPath volume under $STATE/volumes,
# bound to it by claimRef; released volumes are deleted with their data. It is also the
# external resizer of its volumes: a bound claim that asks for more than it has (the API
# server allows that only in a class with allowVolumeExpansion) gets it, as a CSI resizer
# does: the volume's capacity, then the claim's status (a hostPath has no size to grow).
# Polls every 2 s. up.sh runs it as a process of its own; down.sh stops it. (Its argument,
# the state dir, only marks the process as this harness's.)
set -euo pipefail
source "$(dirname "$0")/common.sh"
vols="$STATE/volumes"
mkdir -p "$vols"

provision() { # NAMESPACE NAME UID SIZE ACCESS_MODE CLASS
  local pv="pvc-$3"
  kubectl get pv "$pv" >/dev/null 2>&1 && return 0
  # World-writable like /tmp: pods run as non-root users and hostPath ignores fsGroup.
  mkdir -p "$vols/$pv" && chmod 1777 "$vols/$pv"
  kubectl create -f - >/dev/null <<EOT
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $pv
  annotations: {pv.kubernetes.io/provisioned-by: $E2E_PROVISIONER}
spec:
  capacity: {storage: $4}
  accessModes: [$5]
  persistentVolumeReclaimPolicy: Delete
  storageClassName: $6
  claimRef: {namespace: $1, name: $2, uid: $3}
  hostPath: {path: $vols/$pv, type: Directory}
EOT
  log "provisioned $pv for $1/$2"
}

resize() { # NAMESPACE NAME VOLUME SIZE
  kubectl patch pv "$3" --type=merge -p "{\"spec\":{\"capacity\":{\"storage\":\"$4\"}}}" >/dev/null &&
    kubectl -n "$1" patch pvc "$2" --subresource=status --type=merge \
      -p "{\"status\":{\"capacity\":{\"storage\":\"$4\"}}}" >/dev/null &&
    log "resized $3 for $1/$2 to $4"
}

while sleep 2; do
  kubectl get pvc -A -o jsonpath='{range .items[?(@.status.phase=="Pending")]}{.metadata.namespace} {.metadata.name} {.metadata.uid} {.spec.resources.requests.storage} {.spec.accessModes[0]} {.spec.storageClassName} {.metadata.annotations.volume\.kubernetes\.io/storage-provisioner}{"\n"}{end}' 2>/dev/null |
    while read -r ns name uid size mode class prov; do
      [[ $prov == "$E2E_PROVISIONER" ]] && { provision "$ns" "$name" "$uid" "$size" "$mode" "$class" || log "could not provision $ns/$name"; }
    done || true
  kubectl get pvc -A -o jsonpath='{range .items[?(@.status.phase=="Bound")]}{.metadata.namespace} {.metadata.name} {.spec.volumeName} {.spec.resources.requests.storage} {.status.capacity.storage} {.metadata.annotations.volume\.kubernetes\.io/storage-provisioner}{"\n"}{end}' 2>/dev/null |
    while read -r ns name volume wanted has prov; do
      [[ $prov == "$E2E_PROVISIONER" && $wanted != "$has" ]] && { resize "$ns" "$name" "$volume" "$wanted" || log "could not resize $ns/$name"; }
    done || true
  kubectl get pv -o jsonpath='{range .items[?(@.status.phase=="Released")]}{.metadata.name} {.metadata.annotations.pv\.kubernetes\.io/provisioned-by} {.spec.persistentVolumeReclaimPolicy}{"\n"}{end}' 2>/dev/null |
    while read -r pv by policy; do
      [[ $by == "$E2E_PROVISIONER" && $policy == Delete ]] || continue
      kubectl delete pv "$pv" --wait=false >/dev/null && rm -rf "${vols:?}/$pv" && log "deleted $pv"
    done || true
done
