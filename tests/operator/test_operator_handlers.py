"""The Kopf handler's wiring, driven without Kubernetes: a fake API layer and fake sidecars over HTTP.

It walks a new cluster through bootstrap (pin, create, record the UUID) and the first scale-down step,
checking what is applied, which annotations are patched, and what the sidecars are asked.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import kopf
import pytest
from aiohttp import web
from kubernetes.client.exceptions import ApiException

from coordinated.operator import handlers
from coordinated.operator.config import OperatorConfig
from coordinated.operator.observation import ClaimObservation, PodObservation, StatefulSetObservation
from coordinated.operator.reconcile import driver
from coordinated.operator.sidecar_client import SidecarConnections
from coordinated.operator.spec import (
    ADOPTED_CLAIMS_ANNOTATION,
    CLUSTER_UUID_ANNOTATION,
    INITIAL_MASTER_NODES_ANNOTATION,
)


def _issuer() -> tuple[bytes, bytes]:
    """An API server's OIDC discovery document and JWKS, as `/.well-known/openid-configuration` and
    `/openid/v1/jwks` serve them."""
    from cryptography.hazmat.primitives.asymmetric import ec
    from jwt.algorithms import ECAlgorithm

    key = json.loads(ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP256R1()).public_key()))
    discovery = {
        "issuer": "https://kubernetes.default.svc.cluster.local",
        "jwks_uri": "https://10.0.0.1/openid/v1/jwks",
    }
    return json.dumps(discovery).encode(), json.dumps(
        {"keys": [{**key, "kid": "k1", "use": "sig", "alg": "ES256"}]}
    ).encode()


SERVICE_ACCOUNT_ISSUER = _issuer()


class FakeKube:
    """Holds the CoordinatedCluster and records what the operator writes."""

    def __init__(self, cluster: dict[str, Any]) -> None:
        self.stored = cluster
        self.applied: list[dict[str, Any]] = []
        self.created: list[dict[str, Any]] = []
        self.annotation_patches: list[dict[str, str | None]] = []
        self.replicas: int | None = None
        self.pod_map: dict[str, PodObservation] = {}
        self.claim_names: list[str] = []
        self.events: list[tuple[str, str]] = []  # (reason, message)
        self.secrets: dict[str, dict[str, str]] = {}  # name -> data (base64), as the API server keeps them
        self.cert_manager = False
        self.update_revision: str | None = None
        self.deleted_pods: list[str] = []
        self.nonvoter_replicas: int | None = None
        self.node_zones: dict[str, str] = {}  # Kubernetes node -> zone label
        self.priority_classes: dict[str, tuple[int, str]] = {}  # name -> (value, preemption policy)
        self.revision_templates: dict[str, dict[str, Any]] = {}  # ControllerRevision -> its pod template

    def _keep_secret(self, manifest: dict[str, Any]) -> None:
        if manifest["kind"] == "Secret":
            self.secrets[manifest["metadata"]["name"]] = dict(manifest["data"])

    async def secret_data(self, name: str, namespace: str) -> dict[str, str] | None:
        return self.secrets.get(name)

    async def serves(self, api_version: str, kind: str) -> bool:
        return self.cert_manager

    async def service_account_issuer(self) -> tuple[bytes, bytes]:
        return SERVICE_ACCOUNT_ISSUER

    async def post_event(self, body: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        self.events.append((reason, message))

    async def claims(self, namespace: str, selector: str) -> list[ClaimObservation]:
        return [ClaimObservation(name) for name in self.claim_names]

    async def storage_class_expandable(self, name: str) -> bool | None:
        return None

    async def priority_class(self, name: str) -> tuple[int, str] | None:
        return self.priority_classes.get(name)

    async def revision_template(self, name: str, namespace: str) -> dict[str, Any] | None:
        return self.revision_templates.get(name)

    async def resize_claim(self, name: str, namespace: str, size: str) -> None:
        raise AssertionError("no claim is resized here")

    async def orphan_statefulset(self, name: str, namespace: str) -> None:
        raise AssertionError("no StatefulSet is re-created here")

    async def cluster(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.stored)

    async def patch_annotations(self, namespace: str, name: str, annotations: dict[str, str | None]) -> None:
        self.annotation_patches.append(dict(annotations))
        stored = self.stored["metadata"].setdefault("annotations", {})
        for key, value in annotations.items():
            if value is None:
                stored.pop(key, None)
            else:
                stored[key] = value

    async def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.stored["status"] = status

    @property
    def status(self) -> dict[str, Any]:
        return self.stored["status"]

    async def apply(self, manifest: dict[str, Any]) -> None:
        self.applied.append(manifest)
        self._keep_secret(manifest)
        if manifest["kind"] == "StatefulSet":
            if manifest["metadata"]["name"].endswith("-nonvoter"):
                self.nonvoter_replicas = manifest["spec"]["replicas"]
            else:
                self.replicas = manifest["spec"]["replicas"]

    async def create_if_absent(self, manifest: dict[str, Any]) -> bool:
        if manifest["kind"] == "Secret" and manifest["metadata"]["name"] in self.secrets:
            return False
        self.created.append(manifest)
        self._keep_secret(manifest)
        return True

    async def delete_if_present(self, *args: str) -> bool:
        return False

    async def zones(self, nodes: frozenset[str]) -> dict[str, str | None]:
        return {node: self.node_zones.get(node) for node in nodes}

    async def statefulset(self, name: str, namespace: str) -> StatefulSetObservation | None:
        if name.endswith("-nonvoter"):
            if self.nonvoter_replicas is None:
                return None
            return StatefulSetObservation(replicas=self.nonvoter_replicas)
        if self.replicas is None:
            return None
        applied = [m for m in self.applied if m["kind"] == "StatefulSet" and m["metadata"]["name"] == name]
        template = applied[-1]["spec"]["template"]["spec"] if applied else {"volumes": []}
        return StatefulSetObservation(
            replicas=self.replicas,
            update_revision=self.update_revision,
            volumes=frozenset(volume["name"] for volume in template["volumes"]),
        )

    async def delete_pod(self, name: str, namespace: str) -> None:
        self.deleted_pods.append(name)

    async def pods(self, namespace: str, selector: str) -> dict[str, PodObservation]:
        return self.pod_map


class FakeSidecars:
    """Every pod's sidecar on one local server, under /<pod>/..."""

    def __init__(self) -> None:
        self.uuid: str | None = None
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.authorizations: set[str | None] = set()
        self.voters = ["id0", "id1", "id2"]
        self.node_ids: dict[str, str] = {}  # pod -> the id it reports when not id<ordinal> (new data)

    def state(self) -> dict[str, Any]:
        return {
            "cluster_name": "demo",
            "cluster_uuid": self.uuid or "_na_",
            "version": 5,
            "term": 2,
            "master_node": "id0" if self.uuid else None,
            "nodes": {
                f"id{i}": {"name": f"demo-{i}", "transport_address": "x:9300", "roles": ["master"]} for i in range(3)
            },
            "metadata": {
                "cluster_coordination": {
                    "term": 2,
                    "last_committed_config": self.voters,
                    "last_accepted_config": self.voters,
                    "voting_config_exclusions": [],
                }
            },
        }

    async def handle(self, request: web.Request) -> web.Response:
        pod, path = request.match_info["pod"], "/" + request.match_info["path"]
        self.requests.append((request.method, f"/{pod}{path}", dict(request.query)))
        self.authorizations.add(request.headers.get("Authorization"))
        if path == "/_cluster/state":
            return web.json_response(self.state())
        if path == "/":
            return web.json_response({"name": pod, "node_id": self.node_ids.get(pod, "id" + pod.rsplit("-", 1)[1])})
        if path == "/_cluster/health":
            return web.json_response(
                {"status": "green", "master_node": "id0", "number_of_nodes": 3, "number_of_master_eligible_nodes": 3}
            )
        return web.json_response({})


@contextlib.asynccontextmanager
async def serving(sidecars: FakeSidecars, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[SidecarConnections]:
    """The fake sidecars on a local port, the operator's sidecar URLs pointed at them, and the operator's
    connections to them."""
    app = web.Application()
    app.router.add_route("*", "/{pod}/{path:.*}", sidecars.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        async with SidecarConnections(f"http://127.0.0.1:{runner.addresses[0][1]}/{{pod}}") as http:
            yield http
    finally:
        await runner.cleanup()


def resource(replicas: int = 3) -> dict[str, Any]:
    return {
        "apiVersion": "coordinated.dev/v1alpha1",
        "kind": "CoordinatedCluster",
        "metadata": {"name": "demo", "namespace": "ns", "uid": "u", "generation": 1, "annotations": {}},
        # Plain HTTP fake sidecars here; test_operator_security.py covers TLS to the sidecars.
        "spec": {"replicas": replicas, "tls": {"enabled": False}},
    }


def test_bootstrap_and_first_scale_down_step(monkeypatch: pytest.MonkeyPatch) -> None:
    kube, sidecars = FakeKube(resource()), FakeSidecars()
    events = kube.events
    logger = logging.getLogger("test")

    async def scenario() -> None:
        app = web.Application()
        app.router.add_route("*", "/{pod}/{path:.*}", sidecars.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        async with SidecarConnections(f"http://127.0.0.1:{port}/{{pod}}") as http:
            memo = kopf.Memo(kube=kube, http=http)

            async def reconcile() -> None:
                # Kopf's body is deliberately stale: the handler must re-read the stored object.
                await driver.reconcile(kopf.Body(resource()), memo, logger)

            # 1. A new cluster: the bootstrap list is pinned first; no StatefulSet yet.
            await reconcile()
            assert kube.annotation_patches == [{INITIAL_MASTER_NODES_ANNOTATION: "demo-0,demo-1,demo-2"}]
            assert kube.replicas is None
            configmap = next(m for m in kube.applied if m["metadata"]["name"] == "demo-bootstrap")
            assert configmap["data"]["initial_master_nodes"] == "demo-0,demo-1,demo-2"
            created = sorted(m["metadata"]["name"] for m in kube.created)
            assert created == ["demo-admin", "demo-client", "demo-reader", "demo-transport"]
            assert "demo-tokens" in {m["metadata"]["name"] for m in kube.applied if m["kind"] == "Secret"}
            assert kube.status["phase"] == "Pending"

            # 2. With the list pinned, the StatefulSet is created with the three initial nodes; the list
            #    is never pinned again, even if the requested size changes before the bootstrap.
            kube.stored["spec"]["replicas"] = 5
            await reconcile()
            assert kube.replicas == 3
            assert len(kube.annotation_patches) == 1

            # 3. Pods run and report a cluster UUID: it is recorded and the bootstrap list dropped.
            kube.stored["spec"]["replicas"] = 3
            kube.pod_map = {f"demo-{i}": PodObservation(f"demo-{i}", ready=True, ip="127.0.0.1") for i in range(3)}
            sidecars.uuid = "uuid-1"
            kube.applied.clear()
            await reconcile()
            assert kube.annotation_patches[-1] == {
                CLUSTER_UUID_ANNOTATION: "uuid-1",
                INITIAL_MASTER_NODES_ANNOTATION: None,
            }
            assert kube.stored["metadata"]["annotations"] == {CLUSTER_UUID_ANNOTATION: "uuid-1"}
            configmap = next(m for m in kube.applied if m["metadata"]["name"] == "demo-bootstrap")
            assert configmap["data"]["initial_master_nodes"] == ""
            assert kube.status["clusterUUID"] == "uuid-1"
            assert kube.status["master"] == "demo-0"
            assert ("MasterElected", "demo-0 is master in term 2") in events

            # 4. Converged: no event repeats, the election is not announced twice.
            events.clear()
            await reconcile()
            assert events == []
            assert kube.status["phase"] == "Ready"

            # 5. Scaling to 2: the highest ordinal is excluded on the master, the StatefulSet keeps 3.
            kube.stored["spec"]["replicas"] = 2
            sidecars.requests.clear()
            await reconcile()
            posts = [r for r in sidecars.requests if r[0] == "POST"]
            assert posts == [
                ("POST", "/demo-0/_cluster/voting_config_exclusions", {"node_names": "demo-2", "timeout": "30s"})
            ]
            # Every call, the exclusion included, carries the admin token the operator generated.
            admin_token = base64.b64decode(kube.secrets["demo-admin"]["token"]).decode()
            assert sidecars.authorizations == {f"Bearer {admin_token}"}
            assert kube.replicas == 3
            assert kube.status["phase"] == "Scaling"
            pdb = next(m for m in kube.applied if m["kind"] == "PodDisruptionBudget")
            assert pdb["spec"]["maxUnavailable"] == 1
        await runner.cleanup()

    asyncio.run(scenario())


def test_failures_are_reported_not_raised() -> None:
    class BrokenKube(FakeKube):
        async def statefulset(self, name: str, namespace: str) -> StatefulSetObservation | None:
            raise RuntimeError("API server unreachable")

    kube = BrokenKube(resource())
    memo = kopf.Memo(kube=kube, http=None)
    asyncio.run(driver.reconcile(kopf.Body(resource()), memo, logging.getLogger("test")))
    assert [reason for reason, _ in kube.events] == ["ReconcileFailed"]
    (condition,) = kube.status["conditions"]
    assert condition["type"] == "ReconciliationComplete" and "API server unreachable" in condition["message"]


def _api_error(status: int, reason: str, message: str) -> ApiException:
    """What the kubernetes client raises: its str() carries the HTTP headers and the raw body."""
    error = ApiException(status=status, reason=reason)
    error.headers = {"Audit-Id": "0f3c", "Content-Type": "application/json", "X-Kubernetes-Pf-Flowschema-Uid": "x"}
    error.body = json.dumps({"kind": "Status", "status": "Failure", "message": message, "code": status})
    return error


def test_a_failing_pass_gives_one_short_condition_and_one_event_per_change() -> None:
    invalid = 'StatefulSet.apps "demo" is invalid: spec: Forbidden: updates to statefulset spec are forbidden'

    class RejectingKube(FakeKube):
        message = invalid

        async def apply(self, manifest: dict[str, Any]) -> None:
            if manifest["kind"] == "StatefulSet":
                raise _api_error(422, "Unprocessable Entity", self.message)
            await super().apply(manifest)

    kube = RejectingKube(resource())
    kube.stored["metadata"]["annotations"] = {CLUSTER_UUID_ANNOTATION: "uuid-1"}
    kube.replicas = 3
    memo = kopf.Memo(kube=kube, http=None)

    async def passes(count: int) -> None:
        async with SidecarConnections() as http:
            memo.http = http
            for _ in range(count):
                await driver.reconcile(kopf.Body(resource()), memo, logging.getLogger("test"))

    asyncio.run(passes(3))
    assert [reason for reason, _ in kube.events] == ["ReconcileFailed"]
    (condition,) = [c for c in kube.status["conditions"] if c["type"] == "ReconciliationComplete"]
    assert condition["message"] == f"Kubernetes API error 422 Unprocessable Entity: {invalid}"
    assert "Audit-Id" not in kube.events[0][1] and "HTTP response" not in kube.events[0][1]

    # A different failure is a change: reported once more.
    kube.message = "another problem"
    asyncio.run(passes(2))
    assert [reason for reason, _ in kube.events] == ["ReconcileFailed", "ReconcileFailed"]
    assert kube.events[-1][1].endswith("another problem")


def test_retained_claims_are_announced_as_adopted_data() -> None:
    kube = FakeKube(resource())
    kube.claim_names = ["data-demo-0", "data-demo-1", "data-demo-2", "data-demo-other-0", "reports"]
    memo = kopf.Memo(kube=kube, http=None)

    async def one_pass() -> None:
        async with SidecarConnections() as http:
            memo.http = http
            await driver.reconcile(kopf.Body(resource()), memo, logging.getLogger("test"))

    asyncio.run(one_pass())
    ((reason, message),) = [event for event in kube.events if event[0] != "MasterElected"]
    assert reason == "AdoptingExistingData"
    assert message.startswith("adopting existing data") and "data-demo-0, data-demo-1, data-demo-2" in message
    assert kube.stored["metadata"]["annotations"][ADOPTED_CLAIMS_ANNOTATION] == "data-demo-0,data-demo-1,data-demo-2"
    adopted = next(c for c in kube.status["conditions"] if c["type"] == "ExistingDataAdopted")
    assert adopted["status"] == "True"


def test_an_even_replica_count_is_warned_about_once() -> None:
    kube = FakeKube(resource(replicas=4))
    memo = kopf.Memo(kube=kube, http=None)

    async def passes() -> None:
        async with SidecarConnections() as http:
            memo.http = http
            for _ in range(3):
                await driver.reconcile(kopf.Body(resource()), memo, logging.getLogger("test"))

    asyncio.run(passes())
    assert [reason for reason, _ in kube.events if reason == "EvenReplicas"] == ["EvenReplicas"]
    even = next(c for c in kube.status["conditions"] if c["type"] == "EvenReplicas")
    assert even["status"] == "True"


class EditedDuringThePass(FakeKube):
    """A user edits the spec (the generation moves on) just after the pass has read the resource."""

    async def cluster(self, namespace: str, name: str) -> dict[str, Any] | None:
        read = await super().cluster(namespace, name)
        self.stored["metadata"]["generation"] += 1
        return read


def test_a_rolling_restart_deletes_no_pod_when_the_spec_changed_during_the_pass() -> None:
    """A revert that lands while a pass decides must not cost a restart the new spec does not want: the pass
    reads the generation again just before it deletes, and leaves the pod to the next pass."""
    kube = rolling_restart_pass(EditedDuringThePass(resource()))
    assert kube.deleted_pods == []
    assert [reason for reason, _ in kube.events if reason == "RestartPod"] == []
    assert kube.status["lastAction"] == {
        "kind": "Wait",
        "reason": "not restarting demo-2: the spec changed during this pass",
    }


def test_a_rolling_restart_deletes_one_pod_per_pass_and_reports_each() -> None:
    """Through the real handler: the outdated follower is deleted, with a RestartPod event and the phase."""
    kube = rolling_restart_pass(FakeKube(resource()))
    assert kube.deleted_pods == ["demo-2"]  # a follower first; demo-0 is the fake's master
    restarts = [message for reason, message in kube.events if reason == "RestartPod"]
    assert len(restarts) == 1 and "demo-2" in restarts[0]
    assert kube.status["phase"] == "Restarting"
    statefulset = next(m for m in kube.applied if m["kind"] == "StatefulSet")
    assert statefulset["spec"]["updateStrategy"] == {"type": "OnDelete"}


def rolling_restart_pass(kube: FakeKube) -> FakeKube:
    """One pass over 3 ready pods on an older template than the StatefulSet's."""
    sidecars = FakeSidecars()
    kube.stored["metadata"]["annotations"] = {CLUSTER_UUID_ANNOTATION: "uuid-1"}
    kube.replicas, kube.update_revision, sidecars.uuid = 3, "demo-new", "uuid-1"
    kube.pod_map = {
        f"demo-{i}": PodObservation(f"demo-{i}", ready=True, ip="127.0.0.1", revision="demo-old") for i in range(3)
    }

    async def scenario() -> None:
        app = web.Application()
        app.router.add_route("*", "/{pod}/{path:.*}", sidecars.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        template = f"http://127.0.0.1:{runner.addresses[0][1]}/{{pod}}"
        try:
            async with SidecarConnections(template) as http:
                memo = kopf.Memo(kube=kube, http=http)
                await driver.reconcile(kopf.Body(resource()), memo, logging.getLogger("test"))
        finally:
            await runner.cleanup()

    asyncio.run(scenario())
    return kube


class ScalingSidecars(FakeSidecars):
    """A master (demo-0) that honours voting exclusions and drops a node from its state once its pod is gone."""

    def __init__(self, kube: FakeKube) -> None:
        super().__init__()
        self.kube, self.uuid, self.excluded = kube, "uuid-1", []

    def state(self) -> dict[str, Any]:
        state = super().state()
        state["nodes"] = {i: n for i, n in state["nodes"].items() if n["name"] in self.kube.pod_map}
        coordination = state["metadata"]["cluster_coordination"]
        coordination["voting_config_exclusions"] = [{"node_id": "x", "node_name": n} for n in self.excluded]
        return state

    async def handle(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["path"]
        if path == "/_cluster/voting_config_exclusions":
            self.requests.append((request.method, path, dict(request.query)))
            if request.method == "POST":
                self.excluded = request.query["node_names"].split(",")
                self.voters = [f"id{i}" for i in range(3) if f"demo-{i}" not in self.excluded]
            else:
                self.excluded = []
            return web.json_response({})
        return await super().handle(request)


def test_a_scale_down_runs_its_steps_without_waiting_for_the_periodic_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the chart's 15 s interval, each removed node took two intervals: 5 -> 3 in 60 s."""
    kube = FakeKube(resource(replicas=2))
    kube.stored["metadata"]["annotations"] = {CLUSTER_UUID_ANNOTATION: "uuid-1"}
    kube.replicas = 3
    kube.pod_map = {f"demo-{i}": PodObservation(f"demo-{i}", ready=True, ip="127.0.0.1") for i in range(3)}
    sidecars = ScalingSidecars(kube)

    async def scenario() -> None:
        body = kopf.Body(kube.stored)
        async with serving(sidecars, monkeypatch) as http:
            memo = kopf.Memo(
                kube=kube, http=http, work=handlers.make_work_queue(OperatorConfig(reconcile_interval_seconds=3600.0))
            )  # the periodic pass never comes
            try:
                await handlers.track(event={"type": "ADDED"}, body=body, memo=memo)  # a new cluster: a pass at once
                deadline = asyncio.get_running_loop().time() + 30  # a bound for a loaded machine, not a timing
                while kube.replicas != 2 and asyncio.get_running_loop().time() < deadline:
                    await asyncio.sleep(0.05)
                assert kube.replicas == 2, kube.status.get("lastAction")  # excluded, then removed: no event needed
                del kube.pod_map["demo-2"]  # the StatefulSet controller's part; no pod event reaches the operator
                while sidecars.excluded and asyncio.get_running_loop().time() < deadline:
                    await asyncio.sleep(0.05)
                assert not sidecars.excluded, kube.status.get("lastAction")
                assert [r[0] for r in sidecars.requests if r[1].endswith("exclusions")] == ["POST", "DELETE"]
            finally:
                # Stop following the cluster, and let a pass under way end, before the connections close: a pass
                # that used closed connections would fail (ReconcileFailed), as it would not in the operator.
                under_way = memo.work.pass_under_way("ns/demo")
                await handlers.track(event={"type": "DELETED"}, body=body, memo=memo)
                if under_way is not None:
                    await under_way

    asyncio.run(scenario())
    assert [reason for reason, _ in kube.events if reason not in ("MasterElected", "EvenReplicas")] == [
        "ExcludeFromVoting",
        "SetReplicas",
        "ClearExclusions",
    ]


def test_an_unschedulable_roll_stops_goes_back_to_the_template_that_ran_and_a_new_spec_proceeds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """demo-2 was restarted onto a template the scheduler cannot place, for longer than spec.rollout's bound: the
    roll stops (RolloutBlocked, the scheduler's message), the StatefulSet goes back to the template that ran, the
    Pending pod is replaced at once, and nothing else is restarted until the spec changes."""
    kube, sidecars = FakeKube(resource()), FakeSidecars()
    kube.stored["metadata"]["annotations"] = {CLUSTER_UUID_ANNOTATION: "uuid-1"}
    kube.replicas, kube.update_revision, sidecars.uuid = 3, "demo-new", "uuid-1"
    old_template = {"metadata": {"labels": {"old": "yes"}}, "spec": {"containers": [], "volumes": []}}
    kube.revision_templates["demo-old"] = old_template
    running = {
        f"demo-{i}": PodObservation(f"demo-{i}", ready=True, ip="127.0.0.1", revision="demo-old") for i in (0, 1)
    }
    message = "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules"
    stuck = PodObservation("demo-2", revision="demo-new", unschedulable=message, unschedulable_for=301.0)
    kube.pod_map = {**running, "demo-2": stuck}

    def voters_template() -> dict[str, Any]:
        applied = [m for m in kube.applied if m["kind"] == "StatefulSet" and m["metadata"]["name"] == "demo"]
        return dict(applied[-1]["spec"]["template"])

    def condition(kind: str) -> dict[str, Any]:
        return next(c for c in kube.status["conditions"] if c["type"] == kind)

    async def scenario() -> None:
        async with serving(sidecars, monkeypatch) as http:
            memo = kopf.Memo(kube=kube, http=http)

            async def reconcile() -> None:
                await driver.reconcile(kopf.Body(resource()), memo, logging.getLogger("test"))

            await reconcile()
            assert kube.status["lastAction"]["kind"] == "BlockRollout", kube.status["lastAction"]
            blocked = kube.status["rollout"]
            assert (blocked["revision"], blocked["pod"]) == ("demo-old", "demo-2") and message in blocked["reason"]
            assert condition("RolloutBlocked")["status"] == "True" and message in condition("RolloutBlocked")["message"]
            assert [m for r, m in kube.events if r == "RolloutBlocked"] == [blocked["reason"]]
            assert voters_template() == old_template
            assert kube.deleted_pods == []

            # The StatefulSet controller makes demo-old the update revision again: demo-2 goes at once.
            kube.update_revision = "demo-old"
            await reconcile()
            assert kube.deleted_pods == ["demo-2"]
            assert voters_template() == old_template and kube.status["rollout"] == blocked

            # Back on the old template, the cluster is as before; nothing more is restarted, and the status says why.
            kube.pod_map = {
                **running,
                "demo-2": PodObservation("demo-2", ready=True, ip="127.0.0.1", revision="demo-old"),
            }
            await reconcile()
            await reconcile()
            assert kube.deleted_pods == ["demo-2"] and kube.status["phase"] == "Ready"
            assert "rolling restart stopped" in kube.status["lastAction"]["reason"]

            # Another spec (here, a setting): the roll goes on with its template.
            kube.stored["spec"]["settings"] = {"cluster.publish.timeout": "20s"}
            await reconcile()
            assert kube.status["rollout"] is None and condition("RolloutBlocked")["status"] == "False"
            assert "RolloutUnblocked" in [r for r, _ in kube.events]
            assert voters_template() != old_template

    asyncio.run(scenario())
