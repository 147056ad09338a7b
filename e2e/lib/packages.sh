#!/usr/bin/env bash
# Installs the node's runtime pieces from Debian: etcd, containerd, runc, CNI plugins,
# iptables/conntrack for kube-proxy, nftables (nft) to remove the NetworkPolicy enforcer's table,
# debootstrap for the image rootfs, Maven for the image's s3a:// jars (scripts/fetch-s3a-jars.sh), openssl for
# the object store's key. Skips what is there.
set -euo pipefail
source "$(dirname "$0")/common.sh"

want=(etcd-server containerd runc containernetworking-plugins iptables conntrack nftables debootstrap maven openssl)
missing=()
for p in "${want[@]}"; do
  [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == 'install ok installed' ]] || missing+=("$p")
done
((${#missing[@]})) || exit 0
log "apt-get install ${missing[*]}"
# policy-rc.d 101 keeps the packages' own services (containerd, etcd) from starting:
# up.sh runs them itself with harness-specific config. Leave an existing one alone.
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
fi
export DEBIAN_FRONTEND=noninteractive
timeout 600 apt-get update -qq
timeout 900 apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
