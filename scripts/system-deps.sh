#!/usr/bin/env bash
# Installs the system commands that a Makefile target runs, from Debian's packages, so that the README's
# commands work on a fresh machine. A no-op (no apt call) when every command is already there.
#   scripts/system-deps.sh demo   the audit's Java runtime
#   scripts/system-deps.sh bench  etcd, the peer `make bench` measures against (etcdctl: the command
#                                 line `kv get` is timed against)
#   scripts/system-deps.sh test   the demo's, plus what the tests start: iptables and tc for the chaos run's
#                                 network namespaces, etcd and openssl for the API-server tests, promtool
#                                 (Debian's prometheus package) for the alert rule tests, Maven for the
#                                 jars Spark reads s3a:// with (scripts/fetch-s3a-jars.sh), faketime (its
#                                 libfaketime) for a node whose clock is off in the health diagnosis tests
# Without root it only reports what is missing (the tests that need it then skip and say why).
set -euo pipefail

# Each entry: COMMAND:DEBIAN_PACKAGE.
demo=(java:openjdk-17-jre-headless)
bench=(etcd:etcd-server etcdctl:etcd-client)
test=("${demo[@]}" ip:iproute2 tc:iproute2 iptables:iptables etcd:etcd-server openssl:openssl promtool:prometheus mvn:maven faketime:faketime)

case "${1:-}" in
demo) wanted=("${demo[@]}") ;;
bench) wanted=("${bench[@]}") ;;
test) wanted=("${test[@]}") ;;
*) echo "usage: $0 demo|bench|test" >&2; exit 2 ;;
esac

missing=()
for entry in "${wanted[@]}"; do
  command -v "${entry%%:*}" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "${entry%%:*}" >/dev/null 2>&1 \
    || missing+=("${entry#*:}")
done
((${#missing[@]})) || exit 0
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)

if ((EUID != 0)); then
  echo "system-deps: not root, so not installing: ${missing[*]} (the tests that need them will skip)" >&2
  exit 0
fi
echo "system-deps: apt-get install ${missing[*]}" >&2
# A policy-rc.d that answers 101 keeps packaged services (etcd) from starting: the tests run their own.
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
fi
export DEBIAN_FRONTEND=noninteractive
timeout 600 apt-get update -qq
timeout 900 apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
