"""Kubernetes in production, on one cluster through its life: 3 voters and 2 non-voters on a StorageClass that
can expand, with a snapshot volume and the audit CronJob. The non-voters scale 2 -> 4 -> 0 under a writer
without the voting configuration changing; the audit CronJob runs and the cluster stays Ready; the volumes grow
in place; a voter loses its pod and claim under a writer and is replaced with no human action; the cluster
hibernates and wakes with every key and version. The tests run in file order and share the cluster; each leaves
it settled. No acknowledged write is ever lost."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from e2e.support import (
    Cluster,
    ContinuousWriter,
    apply,
    cluster_manifest,
    committed_ids,
    key_versions,
    kubectl,
    remove_cluster,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

NAME = "prod"
VOTERS = 3
SETTLE = 600  # seconds; generous for a loaded 2-core machine, never a timing assertion
Figure = Callable[[str], None]


def manifest(namespace: str, replicas: int) -> dict[str, Any]:
    return cluster_manifest(
        namespace,
        NAME,
        replicas,
        votingReplicas=VOTERS,
        storage={"size": "1Gi", "storageClassName": "expandable"},
        snapshots={},
        audit={"enabled": True, "schedule": "0 3 * * *"},
    )


@pytest.fixture(scope="module")
def cluster(operator_release: str, namespace: str) -> Iterator[Cluster]:
    yield Cluster(namespace, NAME)
    kubectl("-n", namespace, "delete", "job", f"{NAME}-audit-now", "--ignore-not-found", "--wait=true", timeout=180)
    remove_cluster(namespace, NAME)
    kubectl("-n", namespace, "delete", "pvc", f"{NAME}-snapshots", "--ignore-not-found", "--wait=true", timeout=180)


def settled(cluster: Cluster, nonvoters: int) -> dict[str, Any] | None:
    status = cluster.status()
    done = (
        status.get("phase") == "Ready"
        and status.get("voters") == VOTERS
        and status.get("nonVoters") == nonvoters
        and status.get("readyReplicas") == VOTERS + nonvoters
        and status.get("replicas") == VOTERS + nonvoters
        and not status.get("exclusions")
        and all(node.get("voting") == (node["role"] == "voter") for node in status.get("nodes") or ())
        and status.get("observedGeneration") == cluster.resource()["metadata"]["generation"]
    )
    return status if done else None


def committed(cluster: Cluster) -> dict[str, Any]:
    return cluster.sidecars.state(f"{NAME}-0", local=False)


def test_voters_and_non_voters_form_one_cluster(cluster: Cluster, figure: Figure) -> None:
    started = time.monotonic()
    apply(manifest(cluster.namespace, 5))
    status = wait_until("3 voters and 2 non-voters, Ready", lambda: settled(cluster, 2), SETTLE, interval=1)
    figure(f"production cluster (3 voters, 2 non-voters): apply to Ready in {time.monotonic() - started:.0f} s")
    nodes = status["nodes"]
    assert [(n["name"], n["role"], n["voting"]) for n in nodes] == [
        (f"{NAME}-0", "voter", True),
        (f"{NAME}-1", "voter", True),
        (f"{NAME}-2", "voter", True),
        (f"{NAME}-nonvoter-0", "nonvoter", False),
        (f"{NAME}-nonvoter-1", "nonvoter", False),
    ]
    assert all(n["nodeId"] and n["image"] and n["kubernetesNode"] for n in nodes)
    assert status["votingConfig"] == [f"{NAME}-{i}" for i in range(3)]
    # kubectl get -o wide shows the non-voters and the image.
    wide = kubectl("-n", cluster.namespace, "get", "ccl", NAME, "-o", "wide").stdout.splitlines()
    header, row = wide[0].split(), wide[1].split()
    assert header[-2:] == ["NON-VOTERS", "IMAGE"] and row[-2:] == ["2", nodes[0]["image"]], wide
    # One Kubernetes node here: the voters share it, and the status says so; every pod was scheduled.
    spread = cluster.condition("VotersSpread")
    assert (spread["status"], spread["reason"]) == ("False", "SharedNode") and "share node" in spread["message"]
    assert cluster.condition("PodsScheduled")["status"] == "True"
    # The documented Python client runs in the project image (httpx was missing).
    kubectl(
        "-n",
        cluster.namespace,
        "exec",
        f"{NAME}-0",
        "-c",
        "sidecar",
        "--",
        "python",
        "-c",
        "import coordinated.client, httpx",
    )


def test_non_voters_scale_2_4_0_under_a_writer_without_changing_the_voting_configuration(
    cluster: Cluster, figure: Figure
) -> None:
    before = committed_ids(committed(cluster))
    seen: list[set[str]] = []

    def config_then(check: Callable[[], dict[str, Any] | None]) -> Callable[[], dict[str, Any] | None]:
        def probe() -> dict[str, Any] | None:
            seen.append(committed_ids(cluster.sidecars.state(f"{NAME}-0")))
            return check()

        return probe

    started = time.monotonic()
    with ContinuousWriter(cluster.sidecars, NAME, "nonvoters") as writer:
        cluster.scale(7)
        wait_until("4 non-voters", config_then(lambda: settled(cluster, 4)), SETTLE, interval=1)
        up = time.monotonic() - started
        cluster.scale(3)
        wait_until("no non-voter", config_then(lambda: settled(cluster, 0)), SETTLE, interval=1)
    assert all(config == before for config in seen), [config for config in seen if config != before]
    assert committed_ids(committed(cluster)) == before
    assert not any(e.reason in ("ExcludeFromVoting", "ClearExclusions") for e in cluster.events())
    assert not writer.lost(committed(cluster))
    figure(
        f"non-voters 2 -> 4 -> 0 under a writer: {up:.0f} s up, {time.monotonic() - started - up:.0f} s down, "
        f"voting configuration unchanged ({len(seen)} samples), {len(writer.acknowledged)} writes, none lost, "
        f"longest gap {writer.longest_gap():.2f} s"
    )


def test_the_audit_cronjob_runs_and_the_cluster_stays_ready(cluster: Cluster, figure: Figure) -> None:
    """Its finished pods once counted as nodes: N+1 replicas, Degraded, and Ready never again."""
    started = time.monotonic()
    kubectl("-n", cluster.namespace, "create", "job", f"{NAME}-audit-now", f"--from=cronjob/{NAME}-audit")
    kubectl(
        "-n", cluster.namespace, "wait", "--for=condition=complete", f"job/{NAME}-audit-now", "--timeout=900s",
        timeout=920,
    )  # fmt: skip
    figure(f"audit CronJob run (Spark local mode, 3 nodes): {time.monotonic() - started:.0f} s")
    log = kubectl("-n", cluster.namespace, "logs", f"job/{NAME}-audit-now").stdout
    assert "one-master-per-term" in log and "VIOLATION" not in log, log[-3000:]
    kubectl("-n", cluster.namespace, "wait", "--for=condition=Ready", f"ccl/{NAME}", "--timeout=120s", timeout=130)
    status = wait_until("the status after the audit", lambda: settled(cluster, 0), 120, interval=1)
    assert status["replicas"] == VOTERS  # the finished audit pod is not a node
    pods = json.loads(
        kubectl("-n", cluster.namespace, "get", "pods", "-l", f"job-name={NAME}-audit-now", "-o", "json").stdout
    )
    assert pods["items"] and all(p["status"]["phase"] == "Succeeded" for p in pods["items"])


def test_the_volumes_grow_in_place(cluster: Cluster, figure: Figure) -> None:
    pods_before = {pod.metadata.name: pod.metadata.uid for pod in cluster.pods()}
    started = time.monotonic()
    kubectl("-n", cluster.namespace, "patch", "ccl", NAME, "--type=merge", "-p", '{"spec":{"storage":{"size":"2Gi"}}}')

    def grown() -> dict[str, Any] | None:
        size = cluster.condition("StorageSize")
        return size if size.get("status") == "True" and "2Gi" in size.get("message", "") else None

    wait_until("the StorageSize condition at 2Gi", grown, SETTLE, interval=1)
    figure(f"volumes 1Gi -> 2Gi in place (3 claims): {time.monotonic() - started:.0f} s")
    claims = json.loads(kubectl("-n", cluster.namespace, "get", "pvc", "-o", "json").stdout)["items"]
    data = {c["metadata"]["name"]: c for c in claims if c["metadata"]["name"].startswith(f"data-{NAME}-")}
    assert sorted(data) == [f"data-{NAME}-{i}" for i in range(3)], sorted(data)
    assert {c["status"]["capacity"]["storage"] for c in data.values()} == {"2Gi"}
    sts = json.loads(kubectl("-n", cluster.namespace, "get", "statefulset", NAME, "-o", "json").stdout)
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "2Gi"
    # The StatefulSet was created again around the same pods: none restarted.
    assert {pod.metadata.name: pod.metadata.uid for pod in cluster.pods()} == pods_before
    reasons = [event.reason for event in cluster.events()]
    assert "ExpandingVolumes" in reasons and "VolumesExpanded" in reasons
    assert settled(cluster, 0)


def test_a_voter_that_loses_its_claim_is_replaced_under_a_writer(cluster: Cluster, figure: Figure) -> None:
    lost = f"{NAME}-2"
    old_id = next(n["nodeId"] for n in cluster.status()["nodes"] if n["name"] == lost)
    started = time.monotonic()
    with ContinuousWriter(cluster.sidecars, NAME, "healing") as writer:
        kubectl("-n", cluster.namespace, "delete", "pvc", f"data-{lost}", "--wait=false")
        kubectl("-n", cluster.namespace, "delete", "pod", lost, "--wait=false")

        def healed() -> dict[str, Any] | None:
            status = settled(cluster, 0)
            if status is None:
                return None
            node = next(n for n in status["nodes"] if n["name"] == lost)
            return status if node.get("nodeId") != old_id and node["voting"] and not node.get("replacing") else None

        status = wait_until("full voting strength again", healed, SETTLE, interval=1)
        elapsed = time.monotonic() - started
    new_id = next(n["nodeId"] for n in status["nodes"] if n["name"] == lost)
    state = committed(cluster)
    assert committed_ids(state) == {n["nodeId"] for n in status["nodes"]} and old_id not in committed_ids(state)
    assert not writer.lost(state)
    messages = {event.reason: event.message or "" for event in cluster.events()}
    assert old_id in messages.get("ReplacingMember", "") and new_id in messages.get("ReplacingMember", ""), messages
    assert f"{lost}'s lost node {old_id} left the voting configuration" in messages.get("MemberReplaced", "")
    replacement = cluster.condition("MemberReplacement")
    assert (replacement["status"], replacement["reason"]) == ("False", "Replaced")
    figure(
        f"voter pod and claim deleted to 3 voters again (no human action): {elapsed:.0f} s; "
        f"{len(writer.acknowledged)} writes, none lost, longest gap {writer.longest_gap():.2f} s"
    )


def test_hibernate_and_wake_keep_every_key_and_version(cluster: Cluster, figure: Figure) -> None:
    for i in range(20):
        written = cluster.sidecars.request(f"services/{NAME}", "PUT", f"_cluster/metadata/sleep-{i}", {"n": i})
        assert written.status == 200, written
    keys = sorted(committed(cluster)["metadata"]["kv"])
    before = key_versions(cluster.sidecars, f"services/{NAME}", keys)
    assert len(before) == len(keys) >= 20
    uuid = cluster.status()["clusterUUID"]

    started = time.monotonic()
    cluster.scale(0)
    wait_until(
        "every pod stopped, Hibernating",
        lambda: (cluster.status().get("phase") == "Hibernating" and not cluster.pods()) or None,
        SETTLE,
        interval=1,
    )
    asleep = time.monotonic() - started
    annotations = cluster.resource()["metadata"]["annotations"]
    assert annotations["coordinated.dev/hibernated-voters"] == "3"
    assert annotations["coordinated.dev/hibernation-snapshot"].startswith(f"{NAME}-")
    claims = kubectl("-n", cluster.namespace, "get", "pvc", "-o", "name").stdout.split()
    assert {f"persistentvolumeclaim/data-{NAME}-{i}" for i in range(3)} <= set(claims)  # kept
    suspended = kubectl("-n", cluster.namespace, "get", "cronjob", f"{NAME}-audit", "-o", "jsonpath={.spec.suspend}")
    assert suspended.stdout == "true"

    woken = time.monotonic()
    cluster.scale(3)
    wait_until("awake and Ready", lambda: settled(cluster, 0), SETTLE, interval=1)
    awake = time.monotonic() - woken
    assert cluster.status()["clusterUUID"] == uuid
    after = key_versions(cluster.sidecars, f"services/{NAME}", keys)
    assert after == before, {
        key: (before.get(key), after.get(key)) for key in keys if before.get(key) != after.get(key)
    }
    reasons = [event.reason for event in cluster.events()]
    assert "Hibernate" in reasons and "Wake" in reasons
    figure(
        f"hibernation: to 0 pods (after a snapshot) {asleep:.0f} s, awake and Ready {awake:.0f} s; "
        f"{len(keys)} keys with their versions unchanged"
    )
