"""An ordered rolling restart on the real cluster: a settings change replaces one pod at a time, the master
last, while a writer runs; nothing acknowledged is lost, and the longest write gap is measured.

One three-node cluster, `rolling`, created and deleted here (security off: the writer uses the API
server's proxy, like the other lifecycle tests).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from e2e.support import Cluster, ContinuousWriter, apply, cluster_manifest, kubectl, remove_cluster, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]

NAME = "rolling"
Figure = Callable[[str], None]
SETTLE_SECONDS = 600


def on_current_template(cluster: Cluster) -> bool:
    """Every pod was created from the StatefulSet's current revision."""
    sts = kubectl("-n", cluster.namespace, "get", "statefulset", NAME, "-o", "jsonpath={.status.updateRevision}")
    revision = sts.stdout.strip()
    pods = cluster.pods()
    return (
        bool(revision)
        and len(pods) == 3
        and all((pod.metadata.labels or {}).get("controller-revision-hash") == revision for pod in pods)
    )


def test_a_settings_change_rolls_one_pod_at_a_time_master_last(
    operator_release: str, namespace: str, figure: Figure
) -> None:
    cluster = Cluster(namespace, NAME)
    apply(cluster_manifest(namespace, NAME, 3))
    wait_until("3 settled nodes", lambda: cluster.settled(3), SETTLE_SECONDS, interval=1)
    master_before = cluster.status()["master"]
    uids_before = {pod.metadata.name: pod.metadata.uid for pod in cluster.pods()}
    phases: set[str] = set()

    def rolled() -> dict[str, Any] | None:
        status = cluster.status()
        phases.add(str(status.get("phase")))
        done = len(cluster.events("RestartPod")) >= 3 and on_current_template(cluster)
        return cluster.settled(3) if done else None

    started = time.monotonic()
    with ContinuousWriter(cluster.sidecars, NAME, "during-restart") as writer:
        # A settings change is a new pod template: the operator rolls it out.
        apply(cluster_manifest(namespace, NAME, 3, {"cluster.publish.timeout": "31s"}))
        wait_until("the rolling restart to finish", rolled, SETTLE_SECONDS * 2, interval=1)
    elapsed = time.monotonic() - started

    restarts = sorted(cluster.events("RestartPod"), key=lambda event: event.last_timestamp or event.event_time)
    restarted = [next(pod for pod in uids_before if pod in event.message) for event in restarts]
    assert sorted(restarted) == sorted(uids_before), restarted  # each pod once
    assert restarted[-1] == master_before, f"the master {master_before} was not last: {restarted}"
    assert {pod.metadata.name: pod.metadata.uid for pod in cluster.pods()}.keys() == uids_before.keys()
    assert all(pod.metadata.uid != uids_before[pod.metadata.name] for pod in cluster.pods())
    assert "Restarting" in phases, phases
    state = cluster.sidecars.state(cluster.ready_pods()[0], local=False)
    assert not writer.lost(state)
    figure(
        f"rolling restart of 3 nodes (settings change) under a continuous writer: {elapsed:.0f} s, order "
        f"{' -> '.join(restarted)} (master last), longest gap {writer.longest_gap():.2f} s, "
        f"{len(writer.acknowledged)} acknowledged, {writer.failures} failed, none lost"
    )
    remove_cluster(namespace, NAME)
