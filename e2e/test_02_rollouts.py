"""Rollouts that cannot lose the quorum, on the harness's single-node Kubernetes, under a writer.

The trial's outage: docs/operator.md's scheduling example (one voter per node, required; system-cluster-critical;
a node selector) applied to a running 3-voter cluster. The first restarted pod, of a higher priority, made the
scheduler preempt the two other voters (NoMaster 15 s later), and its revert deadlocked on the Pending pods.
Now the example stops at that one pod, which goes back to the template that ran; a revert proceeds at once even
while a pod is Pending on the unwanted template; and a change that cannot be scheduled at all stops at one pod
and says so. Acknowledged writes are never lost, and the quorum never is.

One cluster, `demo` (the example's label selector names it), created and deleted here; security off, as in
the other lifecycle tests (the writer goes through the API server's proxy).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from e2e.support import Cluster, ContinuousWriter, apply, cluster_manifest, kubectl, remove_cluster, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]

NAME = "demo"
Figure = Callable[[str], None]
SETTLE_SECONDS = 600
# How long a pod of a new template may stay unschedulable before the roll stops (spec.rollout; 5m by default).
UNSCHEDULABLE_TIMEOUT = "20s"
# docs/operator.md, Placement: the example, as written.
EXAMPLE = {
    "nodeSelector": {"node-role.example.com/coordination": "true"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "coordination", "effect": "NoSchedule"}],
    "affinity": {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {
                        "matchLabels": {"app.kubernetes.io/instance": "demo", "coordinated.dev/voting": "true"}
                    },
                }
            ]
        }
    },
    "topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"}
    ],
    "priorityClassName": "system-cluster-critical",
}


def manifest(namespace: str, timeout: str = UNSCHEDULABLE_TIMEOUT, **fields: Any) -> dict[str, Any]:
    return cluster_manifest(namespace, NAME, 3, rollout={"unschedulableTimeout": timeout}, **fields)


@pytest.fixture(scope="module")
def cluster(operator_release: str, namespace: str) -> Iterator[Cluster]:
    # The example's node selector is a label a user gives the nodes meant for coordination: here, the only one.
    (node,) = kubectl("get", "nodes", "-o", "name").stdout.split()
    kubectl("label", "--overwrite", node, "node-role.example.com/coordination=true")
    apply(manifest(namespace))
    cluster = Cluster(namespace, NAME)
    try:
        wait_until("3 settled nodes", lambda: cluster.settled(3), SETTLE_SECONDS, interval=1)
        yield cluster
    finally:
        remove_cluster(namespace, NAME)
        kubectl("label", node, "node-role.example.com/coordination-", check=False)


def uids(cluster: Cluster) -> dict[str, str]:
    return {pod.metadata.name: pod.metadata.uid for pod in cluster.pods()}


class Watch:
    """What the status says while a change rolls: every phase, and whether a master was ever missing."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster, self.phases, self.no_master = cluster, set[str](), 0

    def look(self) -> dict[str, Any]:
        status = self.cluster.status()
        self.phases.add(str(status.get("phase")))
        quorate = next((c for c in status.get("conditions") or () if c["type"] == "Quorate"), {})
        self.no_master += quorate.get("status") == "False"
        return status


def blocked_and_back(cluster: Cluster, watch: Watch, words: str) -> dict[str, Any]:
    """Waits for RolloutBlocked (naming `words` of the scheduler's message), then for the cluster settled again."""

    def blocked() -> dict[str, Any] | None:
        watch.look()
        found = cluster.condition("RolloutBlocked")
        return found if found.get("status") == "True" and words in found.get("message", "") else None

    condition = wait_until(f"RolloutBlocked naming [{words}]", blocked, SETTLE_SECONDS, interval=0.5)
    wait_until("the cluster back on the template that ran", lambda: watch.look() and cluster.settled(3), SETTLE_SECONDS)
    return condition


def test_the_docs_scheduling_example_stops_at_one_pod_without_preempting_anyone(
    cluster: Cluster, namespace: str, figure: Figure
) -> None:
    assert cluster.events("Unschedulable") == [], "a transient unbound-claim wait was reported as an Event"
    before = uids(cluster)
    watch = Watch(cluster)
    started = time.monotonic()
    with ContinuousWriter(cluster.sidecars, NAME, "example") as writer:
        apply(manifest(namespace, scheduling=EXAMPLE))
        # One voter per node (and, on a node without a zone label, the DoNotSchedule spread): "didn't match pod
        # anti-affinity rules", or "didn't match pod topology spread constraints", whichever the scheduler names.
        condition = blocked_and_back(cluster, watch, "didn't match pod")
    after = uids(cluster)
    replaced = sorted(pod for pod in before if after.get(pod) != before[pod])
    assert len(replaced) == 1, f"more than the roll's first pod was replaced (preempted?): {replaced}"
    assert watch.no_master == 0, f"the quorum was lost: phases {sorted(watch.phases)}"
    status = cluster.status()
    assert status["rollout"]["pod"] == replaced[0] and status["rollout"]["revision"]
    assert "preemption: not eligible due to preemptionPolicy=Never" in condition["message"], condition
    assert [event.type for event in cluster.events("RolloutBlocked")] == ["Warning"]
    assert cluster.condition("Ready")["status"] == "True"
    state = cluster.sidecars.state(cluster.ready_pods()[0], local=False)
    assert not writer.lost(state)
    figure(
        f"docs' scheduling example on a 1-node Kubernetes: stopped at {replaced[0]} and back on the template that "
        f"ran in {time.monotonic() - started:.0f} s; no preemption, master throughout, "
        f"{len(writer.acknowledged)} writes acknowledged, {writer.failures} refused, none lost"
    )


def test_its_revert_clears_the_block_and_restarts_nothing(cluster: Cluster, namespace: str) -> None:
    before = uids(cluster)
    apply(manifest(namespace))
    wait_until(
        "RolloutBlocked False", lambda: cluster.condition_with_reason("RolloutBlocked", "NotBlocked"), 120, interval=0.5
    )
    wait_until("3 settled nodes", lambda: cluster.settled(3), SETTLE_SECONDS, interval=1)
    assert uids(cluster) == before, "the revert restarted pods that run the template it asks for"
    assert cluster.events("RolloutUnblocked")
    assert cluster.status().get("rollout") is None


def test_a_revert_while_a_pod_is_pending_on_the_example_proceeds_at_once(
    cluster: Cluster, namespace: str, figure: Figure
) -> None:
    """The trial's deadlock: the pending pod kept the example's template, and the roll waited for it to be Ready.
    Here the example waits as long as it likes (10m) before stopping: only the revert can end the Pending."""
    before = uids(cluster)
    watch = Watch(cluster)
    blocked_before = len(cluster.events("RolloutBlocked"))
    with ContinuousWriter(cluster.sidecars, NAME, "revert") as writer:
        apply(manifest(namespace, timeout="10m", scheduling=EXAMPLE))

        def pending_on_the_example() -> str | None:
            watch.look()
            return next(
                (
                    pod.metadata.name
                    for pod in cluster.pods()
                    if pod.status.phase == "Pending" and pod.metadata.uid not in before.values()
                ),
                None,
            )

        pod = wait_until("a pod Pending on the example's template", pending_on_the_example, SETTLE_SECONDS)
        reverted = time.monotonic()
        apply(manifest(namespace))
        wait_until("3 settled nodes", lambda: watch.look() and cluster.settled(3), SETTLE_SECONDS, interval=0.5)
    assert len(cluster.events("RolloutBlocked")) == blocked_before, "the revert waited for the roll to stop"
    assert watch.no_master == 0
    assert not writer.lost(cluster.sidecars.state(cluster.ready_pods()[0], local=False))
    figure(f"revert while {pod} was Pending on the example: settled {time.monotonic() - reverted:.0f} s later")


def test_a_change_that_cannot_be_scheduled_at_all_stops_at_one_pod_and_says_so(
    cluster: Cluster, namespace: str, figure: Figure
) -> None:
    before = uids(cluster)
    restarts_before = len(cluster.events("RestartPod"))
    watch = Watch(cluster)
    nowhere = {"nodeSelector": {"coordinated.dev/e2e": "nowhere"}}
    with ContinuousWriter(cluster.sidecars, NAME, "nowhere") as writer:
        apply(manifest(namespace, scheduling=nowhere))
        condition = blocked_and_back(cluster, watch, "didn't match Pod's node affinity/selector")
    after = uids(cluster)
    assert len([pod for pod in before if after.get(pod) != before[pod]]) == 1
    restarts = len(cluster.events("RestartPod")) - restarts_before
    assert restarts == 2, restarts  # the roll's first pod, then the same pod back at once
    assert watch.no_master == 0
    assert not writer.lost(cluster.sidecars.state(cluster.ready_pods()[0], local=False))
    figure(f"a change no node can take: stopped at one pod, RolloutBlocked: {condition['message'][:160]}")
    apply(manifest(namespace))  # leave the cluster as the spec that ran
    wait_until("RolloutBlocked False", lambda: cluster.condition_with_reason("RolloutBlocked", "NotBlocked"), 120)
