#!/usr/bin/env bash
# `make e2e-down`: stops everything up.sh started (by the PIDs it recorded), removes
# the containers, mounts, network namespaces, bridge and iptables rules, and restores
# the sysctls. Safe to re-run, and after a half-finished up.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
ctr=(ctr --address "$CONTAINERD_SOCK" -n k8s.io)

# stop NAME: SIGTERM, bounded wait, then SIGKILL.
stop() {
  alive "$1" || { rm -f "$STATE/pids/$1.pid"; return 0; }
  local pid; pid=$(cat "$STATE/pids/$1.pid")
  kill -TERM "$pid" 2>/dev/null || true
  for _ in {1..20}; do alive "$1" || break; sleep 0.5; done
  alive "$1" && { log "$1 ($pid) ignored SIGTERM; killing"; kill -KILL "$pid" 2>/dev/null || true; sleep 0.5; }
  rm -f "$STATE/pids/$1.pid"
}

[[ -d $STATE/pids ]] || [[ -f $STATE/sysctl.before ]] || { log "nothing to tear down"; exit 0; }
# With nothing left to recreate them, deleted pods are torn down by the kubelet itself,
# which runs the CNI DEL and removes their network namespaces.
log "stopping controllers; deleting pods"
stop provisioner
stop coredns
stop s3
stop kube-controller-manager
stop kube-scheduler
if alive kubelet && alive kube-apiserver; then
  kubectl delete pods --all --all-namespaces --force --grace-period=0 --wait=false \
    --request-timeout=20s >/dev/null 2>&1 || true
  for _ in {1..30}; do
    [[ $(timeout 5 "${ctr[@]}" tasks ls 2>/dev/null) == *RUNNING* ]] || break
    sleep 1
  done
fi
log "stopping kubelet, kube-proxy, kube-network-policies, apiserver, etcd, containerd"
stop kubelet
stop kube-proxy
# It deletes its nftables table on SIGTERM; network.sh down removes it if it could not.
stop kube-network-policies
stop kube-apiserver
stop etcd
# Whatever the kubelet did not finish: kill and delete the containers through containerd,
# which also ends their shims.
if alive containerd; then
  c() { timeout 10 "${ctr[@]}" "$@" 2>/dev/null; }
  for id in $(c tasks ls -q); do c tasks kill -s SIGKILL "$id" >/dev/null || true; done
  sleep 1
  for id in $(c tasks ls -q); do c tasks delete -f "$id" >/dev/null || true; done
  for id in $(c containers ls -q); do c containers delete "$id" >/dev/null || true; done
fi
stop containerd
# If containerd died early: delete leftover containers with runc itself, then end the
# shims, which carry our (unique) containerd socket path on their command line.
runc_root="$STATE/containerd/runc/k8s.io"
if [[ -d $runc_root ]]; then
  for id in $(runc --root "$runc_root" list -q 2>/dev/null); do runc --root "$runc_root" delete -f "$id" || true; done
fi
for p in /proc/[0-9]*; do
  cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
  [[ $cmd == *"-address $CONTAINERD_SOCK "* ]] && kill -KILL "${p#/proc/}" 2>/dev/null || true
done

log "removing namespaces, mounts, host paths, network rules; restoring sysctls"
# Pod network namespaces (containerd names them cni-*) created since up.
if [[ -f $STATE/netns.before ]]; then
  for f in /run/netns/cni-*; do
    [[ -e $f ]] && ! grep -qxF "${f##*/}" "$STATE/netns.before" || continue
    umount "$f" 2>/dev/null || true
    rm -f "$f"
  done
fi
# Mounts under the state dir (pod volumes, container rootfs, shm), deepest first.
for m in $(findmnt -rn -o TARGET | grep -F "$STATE/" | sort -r || true); do umount -l "$m" || true; done

# Host paths created since up; kubepods cgroups go deepest first (rmdir is how cgroups go).
if [[ -f $STATE/host-paths.new ]]; then
  while read -r p; do
    case $p in
      /sys/fs/cgroup/*) [[ -d $p ]] && find "$p" -depth -type d -exec rmdir {} + 2>/dev/null || true ;;
      # containerd bind-mounts /run/netns on itself; undo that only if no namespace is left in it.
      /run/netns) [[ -z $(ls -A "$p" 2>/dev/null) ]] && { umount "$p" 2>/dev/null; rmdir "$p" 2>/dev/null; } || true ;;
      *) rm -rf "$p" ;;
    esac
  done <"$STATE/host-paths.new"
fi
# The kubelet's log symlinks and the CNI results cache, where those dirs were already there.
find /var/log/containers -maxdepth 1 -lname "$STATE/*" -delete 2>/dev/null || true
rm -f /var/lib/cni/results/cc-e2e-* 2>/dev/null || true
"$E2E_DIR/lib/network.sh" down
# Keep the component logs for a post-mortem; up.sh starts them afresh.
find "$STATE" -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf {} +
log "down (component logs kept in $STATE/logs)"
