"""Snapshots and restore on the real cluster: write keys into `snapsrc`, take a snapshot through the operator
(the snapshot-request annotation), delete the cluster and its data claims, then create `snapdst` with
spec.restoreFrom over the same snapshot volume and check every key, with its versions, in the new cluster.

Both clusters run one node (security off: the test reads through the API server's proxy, like the other
lifecycle tests); the sidecar integration tests cover multi-node restores. Everything, the snapshot claim
included, is removed at the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from e2e.support import Cluster, apply, cluster_manifest, every_key, kubectl, remove_cluster, wait_ready, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

SOURCE, TARGET = "snapsrc", "snapdst"
CLAIM = f"{SOURCE}-snapshots"  # created by the operator for SOURCE, kept after it is deleted
KEYS = 25
Figure = Callable[[str], None]


def with_snapshots(manifest: dict[str, Any], **extra: Any) -> dict[str, Any]:
    manifest["spec"]["snapshots"] = {"schedule": "0 3 * * *", "retention": 2, **extra.pop("snapshots", {})}
    manifest["spec"].update(extra)
    return manifest


def test_snapshot_delete_the_cluster_and_restore_into_a_new_one(
    operator_release: str, namespace: str, figure: Figure
) -> None:
    started = time.monotonic()
    source, target = Cluster(namespace, SOURCE), Cluster(namespace, TARGET)
    apply(with_snapshots(cluster_manifest(namespace, SOURCE, 1)))
    wait_ready(SOURCE, namespace)
    pod = f"{SOURCE}-0"
    for i in range(KEYS):
        reply = source.sidecars.request(f"pods/{pod}", "PUT", f"_cluster/metadata/app/key-{i}", {"n": i})
        assert reply.status == 200, reply
    assert source.sidecars.request(f"pods/{pod}", "PUT", "_cluster/metadata/app/key-0", "again").status == 200
    expected = every_key(source, pod)
    source_uuid = source.status()["clusterUUID"]

    # A snapshot on request, through the operator (admin token, the repository over the snapshot volume).
    kubectl("-n", namespace, "annotate", f"ccl/{SOURCE}", "coordinated.dev/snapshot-request=e2e-1", "--overwrite")
    snapshots = wait_until(
        "the requested snapshot in the status",
        lambda: (s := source.status().get("snapshots") or {}).get("lastRequest") == "e2e-1" and s,
        timeout=180,
        interval=1,
    )
    assert snapshots.get("lastSnapshot"), snapshots  # taken, not failed
    assert source.events("SnapshotTaken"), "no SnapshotTaken event"
    taken = snapshots["lastSnapshot"]
    listed = source.sidecars.request(f"pods/{pod}", "GET", "_snapshot/snapshots/_all")
    assert [s["snapshot"] for s in listed.body["snapshots"]] == [taken], listed

    # Gone: the cluster and its data claims; the snapshot claim stays.
    remove_cluster(namespace, SOURCE)
    assert not kubectl("-n", namespace, "get", "pvc", f"data-{SOURCE}-0", "--ignore-not-found", "-o", "name").stdout
    assert kubectl("-n", namespace, "get", "pvc", CLAIM, "-o", "name").stdout.strip()

    restore_started = time.monotonic()
    apply(
        with_snapshots(
            cluster_manifest(namespace, TARGET, 1),
            snapshots={"volume": {"claimName": CLAIM}},
            restoreFrom={"snapshot": taken},
        )
    )
    restored = wait_until(
        "the restore in the status",
        lambda: (r := target.status().get("restore") or {}).get("completed") and r,
        timeout=300,
        interval=1,
    )
    restore_seconds = time.monotonic() - restore_started
    assert restored["snapshot"] == taken and restored["keys"] == KEYS
    assert target.status()["clusterUUID"] != source_uuid
    assert every_key(target, f"{TARGET}-0") == expected  # every key, value, version and create_version
    assert len(target.events("SnapshotRestored")) == 1
    figure(
        f"snapshot and restore of {KEYS} keys: whole test {time.monotonic() - started:.0f} s, new cluster "
        f"created to keys restored {restore_seconds:.0f} s"
    )
    remove_cluster(namespace, TARGET)
    kubectl("-n", namespace, "delete", "pvc", CLAIM, "--wait=true", timeout=180)
