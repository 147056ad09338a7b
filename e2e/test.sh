#!/usr/bin/env bash
# The e2e suite against the cluster of `make e2e-up`: its kubeconfig, and its kubectl and helm on PATH.
# Extra arguments go to pytest (e.g. -k audit, -x).
set -euo pipefail
# shellcheck source=e2e/lib/common.sh
source "$(dirname "$0")/lib/common.sh"
[[ -s $KUBECONFIG ]] || die "no cluster: run 'make e2e-up' first"
export PATH
cd "$REPO_DIR"
exec .venv/bin/pytest -m e2e e2e -p no:cacheprovider "$@"
