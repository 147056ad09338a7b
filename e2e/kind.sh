#!/usr/bin/env bash
# The users' path: the same e2e suite on a kind cluster. Needs docker, kind, helm,
# kubectl and the dev virtualenv (`make install`). Not runnable on the CI machine (no
# registry, no privileged containers): CI uses `make e2e-up` instead.
set -euo pipefail
cd "$(dirname "$0")/.."
cluster=${KIND_CLUSTER:-coordinated-e2e}
version=$(python3 e2e/release.py version)
image=coordinated-cluster:$version
mkdir -p e2e/.state
export KUBECONFIG=$PWD/e2e/.state/kind-kubeconfig

# grep without -q reads all its input: no SIGPIPE for kind under pipefail.
kind get clusters 2>/dev/null | grep -x "$cluster" >/dev/null || kind create cluster --name "$cluster" --wait 180s
kind export kubeconfig --name "$cluster" --kubeconfig "$KUBECONFIG"
docker build -t "$image" .
# kind nodes cannot see the host's images: copy it into each node's containerd.
kind load docker-image "$image" --name "$cluster"
# The suite installs the chart with helm itself (e2e/conftest.py), as on the local harness.
.venv/bin/pytest -m e2e e2e -p no:cacheprovider "$@"
echo "kind cluster '$cluster' left running; remove it with: kind delete cluster --name $cluster"
