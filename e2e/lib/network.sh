#!/usr/bin/env bash
# The node's network: a bridge that is the node's address and the pods' gateway, and
# rules so nothing from it is routed off the machine. `up` snapshots the sysctls the
# cluster changes; `down` removes the bridge, our and Kubernetes' iptables rules, the
# NetworkPolicy enforcer's nftables table, and restores the sysctls.
set -euo pipefail
source "$(dirname "$0")/common.sh"

# Sysctls that the kubelet, kube-proxy, the CNI bridge plugin or this script change.
SYSCTLS=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
  net.ipv4.conf.all.route_localnet net.netfilter.nf_conntrack_max
  net.netfilter.nf_conntrack_tcp_timeout_established net.netfilter.nf_conntrack_tcp_timeout_close_wait
  vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
saved="$STATE/sysctl.before"

up() {
  mkdir -p "$STATE"
  # Snapshot once: a re-run after a failed up must not record our own changes as "before".
  if [[ ! -f $saved ]]; then
    for k in "${SYSCTLS[@]}"; do v=$(sysctl -n "$k" 2>/dev/null) && printf '%s=%s\n' "$k" "$v"; done >"$saved.tmp"
    mv "$saved.tmp" "$saved"
  fi
  ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
  ip addr replace "$NODE_IP/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  # Service IPs that have no endpoints (the pod DNS address among them) go to the bridge
  # and die there, instead of following the default route out.
  ip route replace "$SERVICE_CIDR" dev "$BRIDGE"
  # Pod -> service -> pod on one bridge is routed (DNAT) and must pass netfilter.
  sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1
  # Nothing from the bridge leaves through any other interface. mangle runs before
  # filter, where kube-proxy puts its ACCEPT rules.
  for ipt in iptables ip6tables; do
    $ipt -t mangle -N CC-E2E-EGRESS 2>/dev/null || $ipt -t mangle -F CC-E2E-EGRESS
    $ipt -t mangle -A CC-E2E-EGRESS -i "$BRIDGE" ! -o "$BRIDGE" -j DROP
    $ipt -t mangle -C FORWARD -j CC-E2E-EGRESS 2>/dev/null || $ipt -t mangle -I FORWARD 1 -j CC-E2E-EGRESS
  done
}

down() {
  # Remove every rule and chain that kube-proxy, the kubelet, the CNI plugins or we
  # added (KUBE-*, CNI-*, CC-E2E-*), table by table, leaving all other rules as they were.
  for ipt in iptables ip6tables; do
    for t in $($ipt-save | sed -n 's/^\*//p'); do
      rules=$($ipt-save -t "$t")
      grep -qE 'KUBE-|CNI-|CC-E2E-' <<<"$rules" || continue
      # Restoring a table without --noflush replaces that table only.
      grep -vE 'KUBE-|CNI-|CC-E2E-' <<<"$rules" | $ipt-restore
    done
  done
  # The NetworkPolicy enforcer's table, if it was killed before it could delete it.
  nft delete table inet "$KNP_TABLE" 2>/dev/null || true
  ip route del "$SERVICE_CIDR" dev "$BRIDGE" 2>/dev/null || true
  ip link del "$BRIDGE" 2>/dev/null || true
  if [[ -f $saved ]]; then
    while IFS='=' read -r k v; do sysctl -qw "$k=$v" || log "could not restore $k=$v"; done <"$saved"
    rm -f "$saved"
  fi
}

"$@"
