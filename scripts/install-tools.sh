#!/usr/bin/env bash
# Builds the tools the tests and e2e run once and caches them by version, entirely through the Go module proxy
# (this machine reaches nothing else):
#   - helm and kubeconform, with `go install`;
#   - the Kubernetes OpenAPI spec (api/openapi-spec/swagger.json), taken from the k8s.io/kubernetes module
#     so that kubeconform can validate the built-in kinds without downloading schemas;
#   - the prometheus-operator CRDs (for the optional ServiceMonitor), from that project's Go module;
#   - an S3-compatible object store for the archive, snapshot and audit tests: Versity's S3 gateway
#     (versitygw, Apache-2.0) with its posix backend, serving a folder over the S3 API with SigV4 checks;
#   - porcupine-check (tools/porcupine, this repository's source), which checks a recorded history with
#     porcupine, the linearizability checker of MIT 6.5840 and etcd's robustness tests (pinned in its go.mod);
#     cached by the hash of its source.
# Prints KEY=path lines (HELM, KUBECONFORM, K8S_OPENAPI, MONITORING_CRDS, S3_SERVER, PORCUPINE) for callers such
# as the tests. With arguments, only those keys' tools (e.g. `install-tools.sh S3_SERVER`).
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
KUBECONFORM_VERSION="${KUBECONFORM_VERSION:-v0.8.0}"
# The oldest Kubernetes minor the chart supports: validating against it catches fields added later.
K8S_VERSION="${K8S_VERSION:-v1.29.6}"
PROMETHEUS_OPERATOR_VERSION="${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}"
VERSITYGW_VERSION="${VERSITYGW_VERSION:-v1.8.0}"

CACHE="${COORDINATED_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/coordinated-cluster}"
BIN="$CACHE/bin"
mkdir -p "$BIN"

command -v go >/dev/null || { echo "install-tools: go is required (Go 1.22+)" >&2; exit 1; }

# go_install NAME PACKAGE VERSION: builds PACKAGE@VERSION into $BIN/NAME-VERSION unless it is cached.
go_install() {
    local name="$1" package="$2" version="$3" target="$BIN/$1-$3"
    if [[ ! -x "$target" ]]; then
        local tmp
        tmp="$(mktemp -d)"
        echo "install-tools: building $package@$version (once; cached in $BIN)" >&2
        # CGO off gives static binaries and avoids needing a C toolchain.
        CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS="${GOFLAGS:-} -trimpath" go install "$package@$version" >&2
        mv "$tmp/$name" "$target"
        rm -rf "$tmp"
    fi
    ln -sfn "$name-$version" "$BIN/$name"
    echo "$target"
}

# go_build_local NAME DIR: builds the Go program in this repository's DIR into $BIN/NAME-HASH (HASH: of its
# go.mod, go.sum and Go files) unless it is cached; its dependencies come through the Go module proxy.
go_build_local() {
    local name="$1" dir="$2" hash target
    hash="$(cd "$dir" && cat go.mod go.sum ./*.go | sha256sum | cut -c1-12)"
    target="$BIN/$name-$hash"
    if [[ ! -x "$target" ]]; then
        echo "install-tools: building $dir (once per change of its source; cached in $BIN)" >&2
        (cd "$dir" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -trimpath" go build -o "$target.tmp" . >&2)
        mv "$target.tmp" "$target"
    fi
    ln -sfn "$name-$hash" "$BIN/$name"
    echo "$target"
}

# module_file MODULE VERSION PATH DEST: copies PATH out of the module's source (downloaded once) to DEST.
module_file() {
    local module="$1" version="$2" path="$3" dest="$4"
    if [[ ! -s "$dest" ]]; then
        echo "install-tools: fetching $path from $module@$version through the Go module proxy" >&2
        local dir
        dir="$(cd "$(mktemp -d)" && GOFLAGS=-mod=mod go mod download -json "$module@$version" \
            | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
        [[ -n "$dir" && -e "$dir/$path" ]] || { echo "install-tools: $path not in $module@$version" >&2; exit 1; }
        mkdir -p "$(dirname "$dest")"
        cp -r "$dir/$path" "$dest.tmp" && chmod -R u+w "$dest.tmp" && mv "$dest.tmp" "$dest"
    fi
    echo "$dest"
}

# With arguments, only the tools those keys name; without, every one.
REQUESTED=("$@")
((${#REQUESTED[@]})) || REQUESTED=(HELM KUBECONFORM K8S_OPENAPI MONITORING_CRDS S3_SERVER PORCUPINE)
for key in "${REQUESTED[@]}"; do
    # An assignment, not `echo "$(...)"`, so that a failed build stops the script (set -e).
    case "$key" in
    HELM) path="$(go_install helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION")" ;;
    KUBECONFORM) path="$(go_install kubeconform github.com/yannh/kubeconform/cmd/kubeconform "$KUBECONFORM_VERSION")" ;;
    K8S_OPENAPI)
        path="$(module_file k8s.io/kubernetes "$K8S_VERSION" api/openapi-spec/swagger.json \
            "$CACHE/schemas/kubernetes-$K8S_VERSION/swagger.json")"
        ;;
    MONITORING_CRDS)
        path="$(module_file github.com/prometheus-operator/prometheus-operator "$PROMETHEUS_OPERATOR_VERSION" \
            example/prometheus-operator-crd "$CACHE/schemas/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION/crds")"
        ;;
    S3_SERVER) path="$(go_install versitygw github.com/versity/versitygw/cmd/versitygw "$VERSITYGW_VERSION")" ;;
    PORCUPINE) path="$(go_build_local porcupine-check "$(dirname "$0")/../tools/porcupine")" ;;
    *) echo "install-tools: unknown tool [$key]" >&2; exit 2 ;;
    esac
    echo "$key=$path"
done
