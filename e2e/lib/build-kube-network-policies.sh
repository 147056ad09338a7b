#!/usr/bin/env bash
# Builds the NetworkPolicy enforcer through the Go module proxy: kube-network-policies'
# controller package with the harness's own main (e2e/lib/netpol/main.go: a --kubeconfig
# flag, SIGTERM cleanup), and github.com/google/nftables' queue verdict sent as the x_tables
# NFQUEUE target (e2e/lib/netpol/queue_compat.go), for kernels without nft's queue
# expression. Cached by version and by the content of those two files.
set -euo pipefail
source "$(dirname "$0")/common.sh"

src="$E2E_DIR/lib/netpol"
key=$(cat "$src/main.go" "$src/queue_compat.go" | sha256sum | cut -c1-16)
stamp="$KNP_BIN.key"
[[ -x $KNP_BIN && $(cat "$stamp" 2>/dev/null) == "$key" ]] && exit 0
module=sigs.k8s.io/kube-network-policies
work="$CACHE/kube-network-policies/$KNP_VERSION/mod"
rm -rf "$work" && mkdir -p "$work" && cd "$work"
log "building kube-network-policies $KNP_VERSION"
# The checksum database does not list this module: fetch it without asking it, then check
# it against the hashes pinned in common.sh. Its dependencies are checked against its own
# go.sum (copied below) and the checksum database, as usual.
sum=$(GONOSUMDB=$module GOFLAGS=-mod=mod go mod download -json "$module@$KNP_VERSION" |
  sed -n 's/^[[:space:]]*"Sum": "\(.*\)",$/\1/p')
[[ $sum == "$(sed -n "1s/.* //p" <<<"$KNP_SUMS")" ]] ||
  die "$module@$KNP_VERSION has hash '$sum', not the one pinned in e2e/lib/common.sh"
upstream=$(go env GOMODCACHE)/$module@$KNP_VERSION
cp "$src/main.go" main.go
{
  echo "module coordinated.dev/e2e-netpol"
  echo "go $(sed -n 's/^go \([0-9.]*\)/\1/p' "$upstream/go.mod")"
  echo "require $module $KNP_VERSION"
} >go.mod
{ cat "$upstream/go.sum"; echo "$KNP_SUMS"; } >go.sum
GOFLAGS=-mod=mod go mod tidy
nft_version=$(go list -m -f '{{.Version}}' github.com/google/nftables)
cp -r "$(go list -m -f '{{.Dir}}' github.com/google/nftables)" nftables && chmod -R u+w nftables
cp "$src/queue_compat.go" nftables/expr/queue.go
go mod edit -replace "github.com/google/nftables@$nft_version=./nftables"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$KNP_BIN.tmp" .
mv "$KNP_BIN.tmp" "$KNP_BIN"
echo "$key" >"$stamp"
