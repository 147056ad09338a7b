"""The status follows the pods within seconds, and a cluster re-created over its retained claims says that it
adopts their data. One single-node cluster, `lifecycle`, created and deleted here; it leaves nothing behind."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from e2e.support import Cluster, apply, cluster_manifest, kubectl, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

NAME = "lifecycle"
Figure = Callable[[str], None]


@pytest.fixture(scope="module")
def cluster(operator_release: str, namespace: str) -> Cluster:
    return Cluster(namespace, NAME)


def ready(cluster: Cluster) -> None:
    kubectl("-n", cluster.namespace, "wait", "--for=condition=Ready", f"ccl/{NAME}", "--timeout=300s", timeout=320)


def test_the_status_follows_a_pod_deletion_within_seconds(cluster: Cluster, figure: Figure) -> None:
    apply(cluster_manifest(cluster.namespace, NAME, 1))
    ready(cluster)
    assert cluster.status()["readyReplicas"] == 1

    started = time.monotonic()
    kubectl("-n", cluster.namespace, "delete", "pod", f"{NAME}-0", "--wait=false")
    # The pod watch recomputes the status at once: Ready turns False while the pod is away, so that
    # `kubectl wait --for=condition=Ready` cannot pass on the status from before the deletion.
    wait_until(
        "the Ready condition to turn False",
        lambda: cluster.condition("Ready").get("status") == "False" or None,
        60,
    )
    figure(f"pod deleted to Ready=False in the status: {time.monotonic() - started:.1f} s")
    ready(cluster)
    figure(f"pod deleted to Ready again: {time.monotonic() - started:.1f} s")


def test_a_larger_volume_on_a_class_that_cannot_expand_changes_nothing(cluster: Cluster) -> None:
    """The harness's default class, like kind's, has no allowVolumeExpansion: the operator says so and leaves the
    StatefulSet and the claim as they are (test_02_production.py grows volumes on a class that can)."""
    kubectl("-n", cluster.namespace, "patch", "ccl", NAME, "--type=merge", "-p", '{"spec":{"storage":{"size":"2Gi"}}}')

    size = wait_until(
        "the ExpansionNotSupported condition",
        lambda: cluster.condition_with_reason("StorageSize", "ExpansionNotSupported"),
        120,
    )
    assert size["status"] == "False"
    assert "storage.size asks for 2Gi, but StorageClass standard does not allow volume expansion" in size["message"]
    template = kubectl(
        "-n", cluster.namespace, "get", "statefulset", NAME,
        "-o", "jsonpath={.spec.volumeClaimTemplates[0].spec.resources.requests.storage}",
    ).stdout  # fmt: skip
    claim = kubectl(
        "-n", cluster.namespace, "get", "pvc", f"data-{NAME}-0", "-o", "jsonpath={.spec.resources.requests.storage}"
    ).stdout
    assert (template, claim) == ("1Gi", "1Gi")
    assert any(event.reason == "VolumeExpansionNotSupported" for event in cluster.events())
    assert cluster.status()["phase"] == "Ready"  # nothing else is affected

    # The typo is not permanent: no volume grew, so the size goes back (it was refused as a shrink).
    back = kubectl(
        "-n", cluster.namespace, "patch", "ccl", NAME, "--type=merge", "-p", '{"spec":{"storage":{"size":"1Gi"}}}',
        check=False,
    )  # fmt: skip
    assert back.returncode == 0, back.stderr
    wait_until("StorageSize True", lambda: cluster.condition_with_reason("StorageSize", "AsRequested"), 120)
    assert any(event.reason == "VolumesAsRequested" for event in cluster.events())


def test_a_cluster_recreated_over_retained_claims_says_it_adopts_their_data(cluster: Cluster) -> None:
    written = cluster.sidecars.request(f"pods/{NAME}-0", "PUT", "_cluster/metadata/kept", {"n": 1})
    assert written.status == 200, written
    uuid = cluster.status()["clusterUUID"]
    assert not any(event.reason == "AdoptingExistingData" for event in cluster.events())

    kubectl("-n", cluster.namespace, "delete", "ccl", NAME, "--wait=true", timeout=180)
    wait_until("the pod to be gone", lambda: not cluster.pods() or None, 180, interval=1)
    claims = kubectl("-n", cluster.namespace, "get", "pvc", f"data-{NAME}-0", "-o", "name").stdout.split()
    assert claims == [f"persistentvolumeclaim/data-{NAME}-0"]  # whenDeleted: Retain (the default)

    apply(cluster_manifest(cluster.namespace, NAME, 1))
    ready(cluster)
    uid = cluster.resource()["metadata"]["uid"]
    ours = [event for event in cluster.events() if event.involved_object.uid == uid]
    reasons = {event.reason for event in ours}
    assert "AdoptingExistingData" in reasons and "PinBootstrap" not in reasons, reasons
    adopting = next(event for event in ours if event.reason == "AdoptingExistingData")
    message = adopting.message or ""
    assert message.startswith("adopting existing data") and f"data-{NAME}-0" in message
    adopted = cluster.condition("ExistingDataAdopted")
    assert adopted.get("status") == "True", cluster.status()
    # What the message announces is what happened: the old cluster's identity and keys.
    assert cluster.status()["clusterUUID"] == uuid
    read = cluster.sidecars.request(f"pods/{NAME}-0", "GET", "_cluster/metadata/kept")
    assert read.status == 200 and read.body["value"] == {"n": 1}, read

    kubectl("-n", cluster.namespace, "delete", "ccl", NAME, "--wait=true", timeout=180)
    wait_until("the pod to be gone", lambda: not cluster.pods() or None, 180, interval=1)
    kubectl("-n", cluster.namespace, "delete", "pvc", f"data-{NAME}-0", "--wait=true", timeout=180)
