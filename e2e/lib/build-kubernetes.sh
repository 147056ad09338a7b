#!/usr/bin/env bash
# Builds the pinned Kubernetes server binaries from the k8s.io/kubernetes Go module
# (through the Go module proxy) and caches them by version. A no-op when cached.
set -euo pipefail
source "$(dirname "$0")/common.sh"

BINS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
missing=0
for b in "${BINS[@]}"; do [[ -x $K8S_BIN/$b ]] || missing=1; done
if ((!missing)); then log "kubernetes $K8S_VERSION cached in $K8S_BIN"; exit 0; fi

# k8s.io/kubernetes points its staging modules (k8s.io/api, ...) at ./staging, which a
# module consumer cannot see; replace each with its published v0.X.Y twin instead.
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
work="$CACHE/kubernetes/$K8S_VERSION/mod"
mkdir -p "$work" "$K8S_BIN"
cd "$work"
kmod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
[[ -f $kmod ]] || die "could not fetch k8s.io/kubernetes@$K8S_VERSION from the module proxy"
{
  echo "module coordinated.dev/e2e-k8s-build"
  echo "go $(sed -n 's/^go \([0-9.]*\)/\1/p' "$kmod")"
  echo "require k8s.io/kubernetes $K8S_VERSION"
  sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#replace \1 => \1 '"$STAGING_VERSION"'#p' "$kmod"
} >go.mod
rm -f go.sum
pkgs=(); for b in "${BINS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
# Pin the version on each package, or go get would take the latest release.
go get "${pkgs[@]/%/@$K8S_VERSION}"

# Static binaries, versioned the way upstream's hack/lib/version.sh stamps them.
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
  ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done
log "building ${BINS[*]} $K8S_VERSION (several minutes on 2 cores)"
start=$SECONDS
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$K8S_BIN/" "${pkgs[@]}"
log "built kubernetes $K8S_VERSION in $((SECONDS - start))s"
