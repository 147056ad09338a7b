"""Deleting the CoordinatedCluster and `helm uninstall` leave nothing behind but the claims that the PVC
retention policy keeps (whenDeleted: Retain). Runs last: it removes what the other tests use."""

from __future__ import annotations

import pytest

from e2e.conftest import OPERATOR_NAMESPACE, RELEASE, helm
from e2e.support import REPO, kubectl, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

NAME = "e2e"
# Always there, whatever was installed: not ours to remove.
NAMESPACE_DEFAULTS = {"configmap/kube-root-ca.crt", "serviceaccount/default"}


def leftovers(namespace: str) -> set[str]:
    """Every object of every listable namespaced kind in `namespace`, but events and the namespace defaults."""
    kinds = kubectl("api-resources", "--verbs=list", "--namespaced", "-o", "name").stdout.split()
    kinds = [kind for kind in kinds if kind not in ("events", "events.events.k8s.io")]
    found = kubectl("-n", namespace, "get", ",".join(kinds), "-o", "name", "--ignore-not-found").stdout.split()
    # kubectl prints some kinds with their group ("persistentvolumeclaim/x"); keep the kind/name form.
    return {item for item in found if item not in NAMESPACE_DEFAULTS}


def test_deleting_the_cluster_and_uninstalling_leave_only_retained_claims(
    operator_release: str, namespace: str
) -> None:
    # The audit's objects are the test's own (the driver pod, then spark-jobs/k8s/rbac.yaml with the report
    # claim, which a completed driver pod still holds): remove them first.
    kubectl("-n", namespace, "delete", "pods", "-l", "app.kubernetes.io/name=coordinated-audit", "--ignore-not-found")
    rbac = str(REPO / "spark-jobs" / "k8s" / "rbac.yaml")
    kubectl("-n", namespace, "delete", "-f", rbac, "--ignore-not-found", timeout=180)
    # Scale-downs deleted the claims of the removed nodes (whenScaled: Delete): only node 0's is left.
    claims = kubectl("-n", namespace, "get", "pvc", "-o", "name").stdout.split()
    assert claims == [f"persistentvolumeclaim/data-{NAME}-0"], claims

    kubectl("-n", namespace, "delete", "ccl", NAME, "--wait=true", timeout=180)
    expected = {f"persistentvolumeclaim/data-{NAME}-0"}  # whenDeleted: Retain
    wait_until("only the retained claim in the namespace", lambda: leftovers(namespace) == expected, 180, interval=2)

    helm("uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE, "--wait", "--timeout", "5m")
    wait_until("nothing left in the operator's namespace", lambda: leftovers(OPERATOR_NAMESPACE) == set(), 180, 2)
    cluster_scoped = kubectl(
        "get", "clusterroles,clusterrolebindings", "-l", f"app.kubernetes.io/instance={RELEASE}", "-o", "name"
    ).stdout.split()
    assert cluster_scoped == [], cluster_scoped
    # Helm never deletes a chart's CRDs (that would delete every CoordinatedCluster); none is left anyway.
    assert kubectl("get", "ccl", "--all-namespaces", "-o", "name").stdout.split() == []
    assert leftovers(namespace) == expected
