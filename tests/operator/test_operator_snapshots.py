"""spec.snapshots and spec.restoreFrom: the schedule and retention decisions, the pod template, and the handler
driving fake sidecars (register, snapshot, prune, restore once) with status and Events."""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

import kopf
import pytest
from aiohttp import web
from test_operator_handlers import FakeKube, FakeSidecars, resource, serving

from coordinated.operator import manifests
from coordinated.operator.observation import PodObservation
from coordinated.operator.reconcile import driver
from coordinated.operator.sidecar_client import SnapshotInfo
from coordinated.operator.snapshot_schedule import due, own_snapshots, schedule_problem, snapshot_name, to_prune
from coordinated.operator.spec import (
    CLUSTER_UUID_ANNOTATION,
    RESTORED_FROM_ANNOTATION,
    SNAPSHOT_REQUEST_ANNOTATION,
    ClusterSpec,
)

UTC = datetime.UTC


def at(hour: int, minute: int = 0, second: int = 0) -> datetime.datetime:
    return datetime.datetime(2026, 11, 23, hour, minute, second, tzinfo=UTC)


def test_due_once_per_scheduled_time_counting_failed_attempts() -> None:
    created = at(0, 10)
    assert not due("0 * * * *", None, created, at(0, 59))
    assert due("0 * * * *", None, created, at(1, 0))
    assert not due("0 * * * *", at(1, 0, 5), created, at(1, 59))  # attempted (maybe failed) at 1:00
    assert due("0 * * * *", at(1, 0, 5), created, at(2, 0, 1))
    assert due("@hourly", at(1, 0, 5), created, at(2, 0, 0))
    assert not due(None, None, created, at(23))  # no schedule: on request only


def test_a_bad_schedule_names_itself() -> None:
    assert schedule_problem("0 3 * * *") is None and schedule_problem("@daily") is None
    assert "snapshots.schedule [61 * * * *] is not a cron expression" in str(schedule_problem("61 * * * *"))


def test_retention_prunes_only_this_clusters_oldest() -> None:
    def info(name: str) -> SnapshotInfo:
        return SnapshotInfo(name, "SUCCESS", 0)

    names = [snapshot_name("demo", at(h)) for h in (3, 1, 2)]
    listed = [info(n) for n in names] + [info(snapshot_name("demo-2", at(0))), info("demo-manual")]
    assert [s.name for s in own_snapshots("demo", listed)] == [snapshot_name("demo", at(h)) for h in (1, 2, 3)]
    assert to_prune("demo", listed, 2) == [snapshot_name("demo", at(1))]
    assert to_prune("demo", listed, 5) == []
    assert snapshot_name("demo", at(1, 2, 3)) == "demo-20261123-010203"


def snapshot_resource(**spec: Any) -> dict[str, Any]:
    body = resource()
    body["metadata"]["annotations"] = {CLUSTER_UUID_ANNOTATION: "uuid-1"}
    body["metadata"]["creationTimestamp"] = "2026-11-22T00:00:00Z"
    body["spec"].update(spec)
    return body


def test_the_pods_mount_the_snapshot_volume_under_path_repo() -> None:
    spec = ClusterSpec.from_resource(snapshot_resource(snapshots={"retention": 3}))
    pod = manifests.statefulset(spec, 3)["spec"]["template"]["spec"]
    assert {"name": "snapshots", "persistentVolumeClaim": {"claimName": "demo-snapshots"}} in pod["volumes"]
    sidecar = pod["containers"][0]
    assert {"name": "snapshots", "mountPath": "/snapshots"} in sidecar["volumeMounts"]
    assert "path.repo=/snapshots" in sidecar["args"]
    claim = manifests.snapshot_claim(spec)
    assert claim is not None and claim["metadata"]["name"] == "demo-snapshots"
    assert "ownerReferences" not in claim["metadata"]  # outlives the cluster, for a restore
    assert "app.kubernetes.io/instance" not in claim["metadata"]["labels"]  # not deleted with the data claims
    named = ClusterSpec.from_resource(snapshot_resource(snapshots={"volume": {"claimName": "shared"}}))
    assert manifests.snapshot_claim(named) is None
    assert manifests.statefulset(named, 3)["spec"]["template"]["spec"]["volumes"][-1]["persistentVolumeClaim"] == {
        "claimName": "shared"
    }
    plain = ClusterSpec.from_resource(resource())
    assert not any("path.repo" in arg for arg in manifests.sidecar_args(plain))


class MergingKube(FakeKube):
    async def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.stored["status"] = {**(self.stored.get("status") or {}), **status}  # a merge patch


class SnapshotSidecars(FakeSidecars):
    def __init__(self) -> None:
        super().__init__()
        self.uuid = "uuid-1"
        self.snapshots: dict[str, int] = {}  # name -> start ms
        self.fail_snapshots = False
        self.restores: list[str] = []
        self.missing_restore = False

    async def handle(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["path"]
        if not path.startswith("/_snapshot"):
            return await super().handle(request)
        self.requests.append((request.method, path, dict(request.query)))
        parts = path.split("/")[2:]
        if len(parts) == 1 and request.method == "PUT":
            return web.json_response({"acknowledged": True})
        if parts[1:] == ["_all"]:
            infos = [{"snapshot": n, "state": "SUCCESS", "start_time_in_millis": t} for n, t in self.snapshots.items()]
            return web.json_response({"snapshots": infos, "total": len(infos), "remaining": 0})
        if len(parts) == 3 and parts[2] == "_restore":
            if self.missing_restore:
                error = {"type": "snapshot_missing_exception", "reason": f"[snapshots:{parts[1]}] is missing"}
                return web.json_response({"error": error, "status": 404}, status=404)
            self.restores.append(parts[1])
            return web.json_response({"snapshot": {"snapshot": parts[1], "keys": 3, "version": 41, "term": 2}})
        if request.method == "PUT":
            if self.fail_snapshots:
                return web.json_response({"error": {"type": "snapshot_exception", "reason": "disk full"}}, status=500)
            self.snapshots[parts[1]] = len(self.snapshots)
            return web.json_response(
                {"snapshot": {"snapshot": parts[1], "state": "SUCCESS", "state_version": 12, "keys": 3}}
            )
        if request.method == "DELETE":
            del self.snapshots[parts[1]]
            return web.json_response({"acknowledged": True})
        return web.json_response({}, status=400)


def drive(
    monkeypatch: pytest.MonkeyPatch, kube: FakeKube, sidecars: FakeSidecars, steps: Any, running: bool = True
) -> None:
    """`running`: the pods already run the spec's pod template (else the StatefulSet has none of its volumes)."""
    kube.replicas = 3
    if running:
        kube.applied.append(manifests.statefulset(ClusterSpec.from_resource(kube.stored), 3))
    kube.pod_map = {f"demo-{i}": PodObservation(f"demo-{i}", ready=True, ip="127.0.0.1") for i in range(3)}

    async def scenario() -> None:
        async with serving(sidecars, monkeypatch) as http:
            memo = kopf.Memo(kube=kube, http=http)

            async def reconcile() -> None:
                await driver.reconcile(kopf.Body(kube.stored), memo, logging.getLogger("test"))

            await steps(reconcile)

    asyncio.run(scenario())


def reasons(kube: FakeKube) -> list[str]:
    return [reason for reason, _ in kube.events if reason.startswith(("Snapshot", "Restore"))]


def test_scheduled_and_requested_snapshots_with_retention_and_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = MergingKube(snapshot_resource(snapshots={"schedule": "0 * * * *", "retention": 2}))
    sidecars = SnapshotSidecars()
    sidecars.snapshots = {"demo-20261101-000000": -2, "demo-20261102-000000": -1, "demo-2-20261101-000000": -3}

    async def steps(reconcile: Any) -> None:
        await reconcile()  # created yesterday: the hourly snapshot is due
        assert "demo-snapshots" in {m["metadata"]["name"] for m in kube.created}
        status = kube.status["snapshots"]
        assert status["lastSnapshot"].startswith("demo-2026") and status["lastSnapshotVersion"] == 12
        assert status["consecutiveFailures"] == 0 and status["retained"] == 2
        assert ("PUT", "/_snapshot/snapshots", {}) in sidecars.requests
        # Retention 2: this cluster's oldest went; another cluster's (demo-2) is not this one's to prune.
        assert set(sidecars.snapshots) == {"demo-20261102-000000", status["lastSnapshot"], "demo-2-20261101-000000"}
        assert reasons(kube) == ["SnapshotTaken", "SnapshotPruned"]
        kube.events.clear()
        await reconcile()  # not due again before the next hour
        assert reasons(kube) == []
        sidecars.fail_snapshots = True
        kube.stored["metadata"]["annotations"][SNAPSHOT_REQUEST_ANNOTATION] = "1"
        await reconcile()  # a request: taken at once, and here it fails
        assert reasons(kube) == ["SnapshotFailed"]
        status = kube.status["snapshots"]
        assert status["consecutiveFailures"] == 1 and "disk full" in status["lastFailure"]
        assert status["lastRequest"] == "1"
        await reconcile()  # the same request is not retried on every pass
        assert reasons(kube) == ["SnapshotFailed"]

    drive(monkeypatch, kube, sidecars, steps)


def test_restore_from_runs_once_after_the_cluster_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = {
        "snapshots": {"volume": {"claimName": "demo-snapshots"}},
        "restoreFrom": {"snapshot": "old-20261101-000000"},
    }
    kube = MergingKube(snapshot_resource(**spec))
    sidecars = SnapshotSidecars()
    sidecars.missing_restore = True

    async def steps(reconcile: Any) -> None:
        await reconcile()
        await reconcile()
        assert reasons(kube) == ["RestoreFailed"]  # one Event for one failure, however many passes
        assert kube.status["restore"]["completed"] is False
        assert "snapshot_missing_exception" in kube.status["restore"]["lastFailure"]
        sidecars.missing_restore = False
        await reconcile()
        assert sidecars.restores == ["old-20261101-000000"]
        assert kube.status["restore"] == {
            "snapshot": "old-20261101-000000",
            "completed": True,
            "restoredAt": kube.status["restore"]["restoredAt"],
            "version": 41,
            "keys": 3,
            "lastFailure": None,
        }
        assert kube.stored["metadata"]["annotations"][RESTORED_FROM_ANNOTATION] == "old-20261101-000000"
        assert reasons(kube)[-1] == "SnapshotRestored"
        await reconcile()
        del kube.stored["status"]["restore"]  # even a lost status does not restore twice
        await reconcile()
        assert sidecars.restores == ["old-20261101-000000"]
        assert not any(m["metadata"]["name"] == "demo-snapshots" for m in kube.created)  # named, not created

    drive(monkeypatch, kube, sidecars, steps)


def test_snapshots_turned_on_for_a_running_cluster_wait_for_the_pods_to_mount_the_volume(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both the scheduled snapshot and a requested one were asked of pods without path.repo (400), and lost."""
    kube = MergingKube(snapshot_resource(snapshots={"schedule": "0 * * * *"}))
    kube.stored["metadata"]["annotations"][SNAPSHOT_REQUEST_ANNOTATION] = "first"
    sidecars = SnapshotSidecars()

    async def steps(reconcile: Any) -> None:
        await reconcile()  # the StatefulSet gets the snapshot volume now; its pods still run without it
        assert not [r for r in sidecars.requests if r[1].startswith("/_snapshot")]
        assert "snapshots" not in kube.status and reasons(kube) == []
        kube.update_revision = "new"  # the StatefulSet controller's new revision: every pod is now outdated
        kube.pod_map = {name: PodObservation(name, ready=True, ip="127.0.0.1", revision="old") for name in kube.pod_map}
        await reconcile()
        assert not [r for r in sidecars.requests if r[1].startswith("/_snapshot")]
        kube.pod_map = {name: PodObservation(name, ready=True, ip="127.0.0.1", revision="new") for name in kube.pod_map}
        await reconcile()  # rolled: the request that waited is served, and so is the due scheduled snapshot
        assert reasons(kube) == ["SnapshotTaken"]
        assert kube.status["snapshots"]["lastRequest"] == "first"

    drive(monkeypatch, kube, sidecars, steps, running=False)


def test_snapshots_in_a_bucket_need_no_volume_to_be_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wait for the snapshot volume is for `fs` snapshots: a bucket's pods have the S3 client instead."""
    bucket = {"s3": {"bucket": "backups", "endpoint": "http://10.0.0.5:7070", "pathStyleAccess": True}}
    kube = MergingKube(snapshot_resource(snapshots={"schedule": "0 * * * *", **bucket}))
    kube.stored["metadata"]["annotations"][SNAPSHOT_REQUEST_ANNOTATION] = "first"
    sidecars = SnapshotSidecars()

    async def steps(reconcile: Any) -> None:
        await reconcile()
        assert reasons(kube) == ["SnapshotTaken"]
        assert kube.status["snapshots"]["lastRequest"] == "first"

    drive(monkeypatch, kube, sidecars, steps)
