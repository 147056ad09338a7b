"""Non-voting nodes and hibernation through the real handler, against a fake API layer and fake sidecars."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from test_operator_handlers import FakeKube, resource
from test_operator_snapshots import MergingKube, SnapshotSidecars, drive

from coordinated.operator.observation import PodObservation
from coordinated.operator.spec import (
    CLUSTER_UUID_ANNOTATION,
    HIBERNATED_VOTERS_ANNOTATION,
    HIBERNATION_SNAPSHOT_ANNOTATION,
)


class PoolSidecars(SnapshotSidecars):
    """Voters demo-0..2 (ids id0..2) and whatever non-voting pods the fake API layer holds (ids nv<ordinal>)."""

    def __init__(self, kube: FakeKube) -> None:
        super().__init__()
        self.kube = kube

    def state(self) -> dict[str, Any]:
        state = super().state()
        nodes = {i: n for i, n in state["nodes"].items() if n["name"] in self.kube.pod_map}
        for name in self.kube.pod_map:
            if "nonvoter" in name:
                nodes["nv" + name.rsplit("-", 1)[1]] = {"name": name, "transport_address": "x:9300", "roles": []}
        state["nodes"] = nodes
        return state

    async def handle(self, request: web.Request) -> web.Response:
        pod = request.match_info["pod"]
        if request.match_info["path"] == "" and "nonvoter" in pod:
            return web.json_response({"name": pod, "node_id": "nv" + pod.rsplit("-", 1)[1]})
        return await super().handle(request)


def bootstrapped(**spec: Any) -> MergingKube:
    body = resource()
    body["metadata"]["annotations"] = {CLUSTER_UUID_ANNOTATION: "uuid-1"}
    body["metadata"]["creationTimestamp"] = "2026-11-22T00:00:00Z"
    body["spec"].update(spec)
    kube = MergingKube(body)
    kube.replicas = 3
    kube.pod_map = {f"demo-{i}": PodObservation(f"demo-{i}", ready=True, ip="127.0.0.1") for i in range(3)}
    return kube


def applied(kube: FakeKube, name: str, kind: str = "StatefulSet") -> dict[str, Any]:
    return [m for m in kube.applied if m["metadata"]["name"] == name and m["kind"] == kind][-1]


def test_non_voters_scale_in_one_step_and_never_vote(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = bootstrapped(replicas=5, votingReplicas=3)
    sidecars = PoolSidecars(kube)

    async def steps(reconcile: Any) -> None:
        await reconcile()
        nonvoters = applied(kube, "demo-nonvoter")
        assert nonvoters["spec"]["replicas"] == 2 and kube.replicas == 3  # the voters are untouched
        sidecar = nonvoters["spec"]["template"]["spec"]["containers"][0]
        assert "node.roles=[]" in sidecar["args"]
        assert not any("initial_master_nodes" in arg for arg in sidecar["args"])
        assert nonvoters["spec"]["selector"]["matchLabels"]["coordinated.dev/voting"] == "false"
        assert nonvoters["spec"]["updateStrategy"] == {"type": "RollingUpdate"}  # holds no vote: rolled as usual
        for i in range(2):
            name = f"demo-nonvoter-{i}"
            kube.pod_map[name] = PodObservation(name, ready=True, ip="127.0.0.1", voting=False)
        kube.stored["spec"]["replicas"] = 7  # kubectl scale: 4 non-voters
        await reconcile()
        assert applied(kube, "demo-nonvoter")["spec"]["replicas"] == 4 and kube.replicas == 3
        status = kube.status
        assert (status["voters"], status["nonVoters"], status["replicas"]) == (3, 2, 5)
        assert [(n["name"], n["role"], n["voting"]) for n in status["nodes"]] == [
            ("demo-0", "voter", True),
            ("demo-1", "voter", True),
            ("demo-2", "voter", True),
            ("demo-nonvoter-0", "nonvoter", False),
            ("demo-nonvoter-1", "nonvoter", False),
        ]
        assert not [r for r in sidecars.requests if "exclusions" in r[1]]  # the voting configuration is untouched
        # The budget guards the voters only.
        pdb = applied(kube, "demo", "PodDisruptionBudget")
        assert pdb["spec"]["selector"]["matchExpressions"] == [
            {"key": "coordinated.dev/voting", "operator": "NotIn", "values": ["false"]}
        ]
        kube.stored["spec"]["replicas"] = 3  # no non-voter left
        await reconcile()
        assert applied(kube, "demo-nonvoter")["spec"]["replicas"] == 0 and kube.replicas == 3

    drive(monkeypatch, kube, sidecars, steps, running=False)


def test_hibernation_takes_a_snapshot_stops_every_pod_keeps_the_claims_and_wakes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kube = bootstrapped(snapshots={}, audit={"enabled": True})
    kube.applied.append(  # the pods already run with the snapshot volume
        {
            "kind": "StatefulSet",
            "metadata": {"name": "demo"},
            "spec": {"template": {"spec": {"volumes": [{"name": "snapshots"}]}}},
        }
    )
    sidecars = PoolSidecars(kube)
    annotations = kube.stored["metadata"]["annotations"]

    async def steps(reconcile: Any) -> None:
        kube.stored["spec"]["replicas"] = 0
        await reconcile()  # the snapshot first; nothing stops yet
        assert kube.replicas == 3 and kube.status["phase"] == "Hibernating"
        snapshot = annotations[HIBERNATION_SNAPSHOT_ANNOTATION]
        assert snapshot.startswith("demo-") and snapshot in sidecars.snapshots
        assert applied(kube, "demo")["spec"]["persistentVolumeClaimRetentionPolicy"]["whenScaled"] == "Retain"
        await reconcile()  # then every pod at once, keeping the claims
        assert kube.replicas == 0 and annotations[HIBERNATED_VOTERS_ANNOTATION] == "3"
        assert not [r for r in sidecars.requests if "exclusions" in r[1]]
        assert applied(kube, "demo-audit", "CronJob")["spec"]["suspend"] is True
        kube.pod_map = {}
        await reconcile()
        assert kube.status["phase"] == "Hibernating" and kube.status["lastAction"]["kind"] == "None"
        ready = next(c for c in kube.status["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "Hibernating")

        kube.stored["spec"]["replicas"] = 3  # wake
        await reconcile()
        assert kube.replicas == 3 and kube.status["phase"] == "Scaling"
        assert applied(kube, "demo")["spec"]["persistentVolumeClaimRetentionPolicy"]["whenScaled"] == "Retain"
        kube.pod_map = {f"demo-{i}": PodObservation(f"demo-{i}", ready=True, ip="127.0.0.1") for i in range(3)}
        await reconcile()
        assert HIBERNATED_VOTERS_ANNOTATION not in annotations and HIBERNATION_SNAPSHOT_ANNOTATION not in annotations
        await reconcile()
        assert kube.status["phase"] == "Ready"
        assert applied(kube, "demo")["spec"]["persistentVolumeClaimRetentionPolicy"]["whenScaled"] == "Delete"
        assert applied(kube, "demo-audit", "CronJob")["spec"]["suspend"] is False
        reasons = [reason for reason, _ in kube.events]
        assert reasons.index("SnapshotTaken") < reasons.index("Hibernate") < reasons.index("Wake")

    drive(monkeypatch, kube, sidecars, steps, running=False)
