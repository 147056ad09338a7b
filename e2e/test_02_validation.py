"""Bad input: the API server rejects an invalid CoordinatedCluster with a clear message; settings that only
the sidecar's parser can judge give a status condition and an event, and nothing crash-loops."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from e2e.conftest import OPERATOR_NAMESPACE, OPERATOR_SELECTOR
from e2e.support import Cluster, apply, cluster_manifest, kubectl, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


@pytest.mark.parametrize(
    ("replicas", "settings", "message"),
    [
        (-1, None, "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"),
        (1, {"discovery.zen.minimum_master_nodes": "2"}, "setting [discovery.zen.minimum_master_nodes] is from Zen1"),
        (
            1,
            {"cluster.publish.timeout": "30"},
            "invalid value for setting [cluster.publish.timeout] (30): expected a positive time with a unit",
        ),
        (1, {"node.name": "mine"}, "setting [node.name] is managed by the operator"),
    ],
    ids=["negative-replicas", "zen1-setting", "time-without-unit", "managed-setting"],
)
def test_the_api_server_rejects_an_invalid_cluster_with_a_clear_message(
    operator_release: str, namespace: str, replicas: int, settings: dict[str, str] | None, message: str
) -> None:
    done = apply(cluster_manifest(namespace, "invalid", replicas, settings), check=False)
    assert done.returncode != 0, "the API server accepted an invalid CoordinatedCluster"
    assert message in done.stderr, done.stderr
    assert "invalid" not in kubectl("-n", namespace, "get", "ccl", "-o", "name").stdout


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"votingReplicas": 5},
            "spec.votingReplicas: Forbidden: spec.votingReplicas (5) cannot exceed spec.replicas (3)",
        ),
        (
            {"scheduling": {"tolerations": [{"key": "dedicated", "operator": "Sometimes"}]}},
            'spec.scheduling.tolerations[0].operator: Unsupported value: "Sometimes"',
        ),
    ],
    ids=["voting-above-replicas", "bad-toleration"],
)
def test_the_api_server_rejects_invalid_membership_and_placement(
    operator_release: str, namespace: str, fields: dict[str, Any], message: str
) -> None:
    done = apply(cluster_manifest(namespace, "invalid", 3, **fields), check=False)
    assert done.returncode != 0, "the API server accepted an invalid CoordinatedCluster"
    assert message in done.stderr, done.stderr
    assert "invalid" not in kubectl("-n", namespace, "get", "ccl", "-o", "name").stdout


def test_invalid_settings_give_a_condition_and_an_event_not_a_crash_loop(operator_release: str, namespace: str) -> None:
    core = client.CoreV1Api()
    restarts_before = _operator_restarts(core)
    # Valid for the schema, but no sidecar could start with it: max_timeout below initial_timeout.
    bad = {"cluster.election.initial_timeout": "5s", "cluster.election.max_timeout": "1s"}
    apply(cluster_manifest(namespace, "bad-settings", 1, bad))
    cluster = Cluster(namespace, "bad-settings")
    expected = "[cluster.election.max_timeout] is [1s], but must be at least [cluster.election.initial_timeout]"

    condition = wait_until(
        "the InvalidSpec condition",
        lambda: cluster.condition_with_reason("ReconciliationComplete", "InvalidSpec"),
        120,
    )
    assert condition["status"] == "False"
    assert expected in condition["message"]
    events = wait_until("a ScalingRefused event", lambda: cluster.events("ScalingRefused"), 60)
    assert any(expected in (event.message or "") and event.type == "Warning" for event in events), events
    assert cluster.pods() == [], "pods were started with settings they cannot run with"
    assert _operator_restarts(core) == restarts_before, "the operator restarted"

    # Fixing the settings lets the cluster form: the refusal is not sticky.
    apply(cluster_manifest(namespace, "bad-settings", 1, {"cluster.election.initial_timeout": "500ms"}))
    kubectl("-n", namespace, "wait", "--for=condition=Ready", "ccl/bad-settings", "--timeout=300s", timeout=320)
    kubectl("-n", namespace, "delete", "ccl", "bad-settings", "--wait=true", timeout=180)
    # Its claim is kept (whenDeleted: Retain); this test's own, so removed here.
    wait_until("the pod to go", lambda: cluster.pods() == [], 120)
    kubectl("-n", namespace, "delete", "pvc", "data-bad-settings-0", "--wait=true", timeout=120)


def _operator_restarts(core: client.CoreV1Api) -> dict[str, int]:
    pods = core.list_namespaced_pod(OPERATOR_NAMESPACE, label_selector=OPERATOR_SELECTOR).items
    return {
        pod.metadata.name: sum(status.restart_count for status in pod.status.container_statuses or ()) for pod in pods
    }


def test_a_placement_that_cannot_be_scheduled_is_a_condition_with_the_schedulers_reason(
    operator_release: str, namespace: str
) -> None:
    """Not a silent Pending: PodsScheduled False names the pod and the scheduler's message, with an Event."""
    apply(cluster_manifest(namespace, "nowhere", 1, scheduling={"nodeSelector": {"coordinated.dev/e2e": "nowhere"}}))
    cluster = Cluster(namespace, "nowhere")
    try:
        # The scheduler's message changes as it retries: with an Immediate StorageClass it first says the claim
        # is unbound until the provisioner has bound it, then names the node selector. The condition follows it.
        def for_the_selector() -> dict[str, Any] | None:
            found = cluster.condition_with_reason("PodsScheduled", "Unschedulable")
            return found if found and "didn't match Pod's node affinity/selector" in found["message"] else None

        scheduled = wait_until("the PodsScheduled condition naming the node selector", for_the_selector, 180)
        assert scheduled["status"] == "False"
        assert scheduled["message"].startswith("nowhere-0 cannot be scheduled: 0/1 nodes are available")
        events = wait_until("an Unschedulable event", lambda: cluster.events("Unschedulable"), 60)
        assert events[0].type == "Warning" and "nowhere-0 cannot be scheduled" in (events[0].message or "")
    finally:  # whatever happened: the uninstall test expects no claim but the retained one
        kubectl("-n", namespace, "delete", "ccl", "nowhere", "--ignore-not-found", "--wait=true", timeout=180)
        wait_until("the pod to go", lambda: cluster.pods() == [], 120)
        kubectl("-n", namespace, "delete", "pvc", "data-nowhere-0", "--ignore-not-found", "--wait=true", timeout=120)
