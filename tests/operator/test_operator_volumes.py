"""Growing the data volumes: the pure plan (volumes.py) and the handler's steps, driven against fakes."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf
import pytest
from test_operator_handlers import FakeKube, resource

from coordinated.operator import manifests, volumes
from coordinated.operator.observation import ClaimObservation, PodObservation, StatefulSetObservation
from coordinated.operator.planner import Action, ActionKind
from coordinated.operator.reconcile import driver, observe
from coordinated.operator.sidecar_client import SidecarConnections
from coordinated.operator.spec import CLUSTER_UUID_ANNOTATION, ClusterSpec
from coordinated.operator.status import Condition


def sts(claim_size: str = "1Gi", deleting: bool = False) -> StatefulSetObservation:
    return StatefulSetObservation(replicas=3, claim_size=claim_size, deleting=deleting)


def claims(requested: str = "1Gi", capacity: str | None = "1Gi", count: int = 3) -> list[ClaimObservation]:
    return [ClaimObservation(f"data-demo-{i}", requested, capacity, "fast") for i in range(count)]


def test_a_new_statefulset_takes_the_specs_size_and_says_nothing() -> None:
    assert volumes.plan_volumes("5Gi", None, [], None, None) == volumes.VolumePlan("5Gi")


def test_an_unchanged_size_is_as_requested() -> None:
    plan = volumes.plan_volumes("1Gi", sts(), claims(), None, None)
    assert (plan.template_size, plan.expand, plan.recreate_statefulset) == ("1Gi", (), False)
    assert plan.condition is not None and plan.condition.status and plan.condition.reason == "AsRequested"
    # Quantities compare by value, not by spelling.
    assert volumes.plan_volumes("1024Mi", sts(), claims(), None, None).expand == ()


def test_growing_raises_every_claim_and_recreates_the_statefulset_with_the_old_template_until_then() -> None:
    plan = volumes.plan_volumes("2Gi", sts(), claims(), True, "fast")
    assert plan.expand == ("data-demo-0", "data-demo-1", "data-demo-2")
    assert plan.recreate_statefulset and plan.template_size == "1Gi"  # a template cannot change in place
    assert plan.condition is not None and (plan.condition.status, plan.condition.reason) == (False, "Expanding")
    # Deleted meanwhile: not deleted twice. Once gone, the new StatefulSet has the new size.
    assert not volumes.plan_volumes("2Gi", sts(deleting=True), claims("2Gi"), True, "fast").recreate_statefulset
    assert volumes.plan_volumes("2Gi", None, claims("2Gi"), True, "fast").template_size == "2Gi"


def test_the_condition_waits_for_each_claims_capacity() -> None:
    resizing = [
        ClaimObservation("data-demo-0", "2Gi", "2Gi", "fast"),
        ClaimObservation("data-demo-1", "2Gi", "1Gi", "fast"),
        ClaimObservation("data-demo-2", "2Gi", None, "fast"),  # a new pod's claim, not bound yet: not waited for
    ]
    plan = volumes.plan_volumes("2Gi", sts("2Gi"), resizing, True, "fast")
    assert plan.expand == () and not plan.recreate_statefulset
    assert plan.condition is not None and plan.condition.reason == "Expanding"
    assert plan.condition.message == "expanding the volumes to 2Gi: waiting for data-demo-1 (has 1Gi)"
    done = volumes.plan_volumes("2Gi", sts("2Gi"), claims("2Gi", "2Gi"), None, None)
    assert done.condition is not None and done.condition.status


def test_a_class_that_cannot_expand_changes_nothing_and_says_why() -> None:
    plan = volumes.plan_volumes("2Gi", sts(), claims(), False, "standard")
    assert (plan.template_size, plan.expand, plan.recreate_statefulset) == ("1Gi", (), False)
    assert plan.condition is not None and plan.condition.reason == "ExpansionNotSupported"
    assert "storage.size asks for 2Gi, but StorageClass standard does not allow volume expansion" in (
        plan.condition.message
    )
    assert "the volumes stay at 1Gi" in plan.condition.message


def test_shrinking_and_resize_failures_are_reported() -> None:
    shrink = volumes.plan_volumes("1Gi", sts("2Gi"), claims("2Gi", "2Gi"), True, "fast")
    assert shrink.template_size == "2Gi" and shrink.expand == ()
    assert shrink.condition is not None and shrink.condition.reason == "ShrinkNotSupported"
    failing = [ClaimObservation("data-demo-0", "2Gi", "1Gi", "fast", "ControllerResizeError: quota exceeded")]
    plan = volumes.plan_volumes("2Gi", sts("2Gi"), failing, True, "fast")
    assert plan.condition is not None and plan.condition.reason == "ExpansionFailed"
    assert "data-demo-0: ControllerResizeError: quota exceeded" in plan.condition.message


def test_a_size_that_never_took_can_be_set_back() -> None:
    """The trial: 1Gi to 2Gi on a class that cannot expand (refused, nothing changed), then back to 1Gi, which
    the CRD refused as a shrink although no volume ever grew. The check is against the claims' capacity."""
    refused = volumes.plan_volumes("2Gi", sts(), claims(), False, "standard")
    assert refused.condition is not None and refused.condition.reason == "ExpansionNotSupported"
    back = volumes.plan_volumes("1Gi", sts(), claims(), None, None)
    assert back.condition is not None and (back.condition.status, back.condition.reason) == (True, "AsRequested")
    assert volumes.event_for(back, "ExpansionNotSupported")[:2] == ("Normal", "VolumesAsRequested")  # type: ignore[index]
    # An expansion that failed: the template says 2Gi, the claims ask 2Gi but have 1Gi. Back to 1Gi: no volume
    # shrinks, and the template follows (the StatefulSet is created again with it, as for a growth).
    failed = volumes.plan_volumes("1Gi", sts("2Gi"), claims("2Gi", "1Gi"), True, "fast")
    assert failed.condition is not None and failed.condition.reason == "Resizing", failed.condition
    assert failed.recreate_statefulset and failed.expand == ()
    recreated = volumes.plan_volumes("1Gi", None, claims("2Gi", "1Gi"), True, "fast")
    assert recreated.template_size == "1Gi" and recreated.condition is not None and recreated.condition.status
    # A volume that did grow still refuses, naming what it has.
    grown = volumes.plan_volumes("1Gi", sts("1Gi"), [*claims("2Gi", "1Gi", 2), *claims("2Gi", "2Gi", 1)], True, "fast")
    assert grown.condition is not None and grown.condition.reason == "ShrinkNotSupported"
    assert "the volumes have 2Gi" in grown.condition.message


def test_the_class_is_only_looked_up_when_the_spec_asks_for_more() -> None:
    assert volumes.class_to_check("1Gi", sts(), claims()) is None
    assert volumes.class_to_check("2Gi", sts(), claims()) == "fast"
    assert volumes.class_to_check("2Gi", sts("2Gi"), claims("1Gi")) == "fast"  # a claim left behind
    assert volumes.class_to_check("2Gi", None, []) is None


def test_events_follow_the_conditions_reason() -> None:
    expanding = volumes.plan_volumes("2Gi", sts(), claims(), True, "fast")
    done = volumes.plan_volumes("2Gi", sts("2Gi"), claims("2Gi", "2Gi"), None, None)
    assert volumes.event_for(expanding, "AsRequested")[:2] == ("Normal", "ExpandingVolumes")  # type: ignore[index]
    assert volumes.event_for(expanding, "Expanding") is None
    assert volumes.event_for(done, "Expanding")[:2] == ("Normal", "VolumesExpanded")  # type: ignore[index]
    assert volumes.event_for(done, None) is None and volumes.event_for(done, "AsRequested") is None
    refused = volumes.plan_volumes("2Gi", sts(), claims(), False, "standard")
    assert volumes.event_for(refused, "AsRequested")[:2] == ("Warning", "VolumeExpansionNotSupported")  # type: ignore[index]


def test_the_statefulset_renders_the_planned_claim_size() -> None:
    spec = ClusterSpec.from_resource({"metadata": {"name": "demo"}, "spec": {"storage": {"size": "2Gi"}}})
    rendered = manifests.statefulset(spec, 3, claim_size="1Gi")
    assert rendered["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"] == {"storage": "1Gi"}
    rendered = manifests.statefulset(spec, 3)
    assert rendered["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"] == {"storage": "2Gi"}


class StorageKube(FakeKube):
    """Claims with sizes, a StorageClass, and a StatefulSet that can be deleted (orphaning) and created again."""

    def __init__(self, cluster: dict[str, Any], expandable: bool) -> None:
        super().__init__(cluster)
        self.expandable = expandable
        self.sizes = {f"data-demo-{i}": "1Gi" for i in range(3)}
        self.claim_template = "1Gi"
        self.deleting = False
        self.resized: list[tuple[str, str]] = []
        self.orphaned = 0

    async def claims(self, namespace: str, selector: str) -> list[ClaimObservation]:
        return [ClaimObservation(name, size, size, "fast") for name, size in sorted(self.sizes.items())]

    async def storage_class_expandable(self, name: str) -> bool | None:
        return self.expandable

    async def resize_claim(self, name: str, namespace: str, size: str) -> None:
        self.resized.append((name, size))
        self.sizes[name] = size  # a storage system that grows at once

    async def orphan_statefulset(self, name: str, namespace: str) -> None:
        self.orphaned += 1
        self.deleting = True

    async def statefulset(self, name: str, namespace: str) -> StatefulSetObservation | None:
        if self.replicas is None or name.endswith("-nonvoter"):
            return None
        return StatefulSetObservation(self.replicas, claim_size=self.claim_template, deleting=self.deleting)

    async def apply(self, manifest: dict[str, Any]) -> None:
        if manifest["kind"] == "StatefulSet":
            assert not self.deleting, "a StatefulSet being deleted was applied"
            template = manifest["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]
            if self.replicas is not None:
                assert template == self.claim_template, "the claim template of an existing StatefulSet changed"
            self.claim_template = template
        await super().apply(manifest)


def run_passes(kube: FakeKube, count: int, between: Any = None) -> None:
    async def passes() -> None:
        async with SidecarConnections() as http:
            memo = kopf.Memo(kube=kube, http=http)
            for index in range(count):
                await driver.reconcile(kopf.Body(kube.stored), memo, logging.getLogger("test"))
                if between is not None:
                    between(index)

    asyncio.run(passes())


def bootstrapped(size: str, expandable: bool) -> StorageKube:
    body = resource()
    body["metadata"]["annotations"] = {CLUSTER_UUID_ANNOTATION: "uuid-1"}
    body["spec"]["storage"] = {"size": size}
    kube = StorageKube(body, expandable)
    kube.replicas = 3
    # Not sidecars: pods without an IP are not asked, and the planner waits (no master), which is all the
    # volume steps need here apart from the StatefulSet's re-creation.
    kube.pod_map = {f"demo-{i}": PodObservation(f"demo-{i}") for i in range(3)}
    return kube


def storage_condition(kube: FakeKube) -> dict[str, Any]:
    return next(c for c in kube.status["conditions"] if c["type"] == "StorageSize")


def test_growing_through_the_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = bootstrapped("2Gi", expandable=True)
    # The StatefulSet is only re-created when nothing else is under way: pretend the planner is done.
    real_plan = observe.plan
    converged = Action(ActionKind.NONE, "done", 3)
    monkeypatch.setattr(observe, "plan", lambda obs: converged)

    def gc(index: int) -> None:
        if kube.deleting:  # the garbage collector removes the orphaned StatefulSet
            kube.replicas, kube.deleting = None, False

    run_passes(kube, 1)
    assert kube.resized == [(f"data-demo-{i}", "2Gi") for i in range(3)] and kube.orphaned == 1
    assert storage_condition(kube)["reason"] == "Expanding"
    assert ("ExpandingVolumes", storage_condition(kube)["message"]) in kube.events
    monkeypatch.setattr(observe, "plan", real_plan)
    run_passes(kube, 2, between=gc)
    assert kube.claim_template == "2Gi" and kube.replicas == 3 and kube.orphaned == 1  # re-created, at 3
    assert storage_condition(kube)["status"] == "True"
    assert [reason for reason, _ in kube.events if "Volume" in reason] == ["ExpandingVolumes", "VolumesExpanded"]


def test_a_class_that_cannot_expand_through_the_handler() -> None:
    kube = bootstrapped("2Gi", expandable=False)
    run_passes(kube, 2)
    assert kube.resized == [] and kube.orphaned == 0 and kube.claim_template == "1Gi"
    condition = storage_condition(kube)
    assert (condition["status"], condition["reason"]) == ("False", "ExpansionNotSupported")
    assert [reason for reason, _ in kube.events if "Volume" in reason] == ["VolumeExpansionNotSupported"]


class TwoPoolKube(StorageKube):
    """Voters and non-voters, each with its own StatefulSet and claims."""

    def __init__(self, cluster: dict[str, Any], expandable: bool) -> None:
        super().__init__(cluster, expandable)
        self.sizes |= {f"data-demo-nonvoter-{i}": "1Gi" for i in range(2)}

    async def statefulset(self, name: str, namespace: str) -> StatefulSetObservation | None:
        if name.endswith("-nonvoter"):
            return StatefulSetObservation(2, claim_size="1Gi")
        return await super().statefulset(name, namespace)


def test_both_pools_not_as_asked_make_one_condition_naming_both() -> None:
    # The API server refuses a status that holds a condition type twice (conditions are a map by type).
    body = bootstrapped("2Gi", expandable=False).stored
    body["spec"]["votingReplicas"] = 3
    body["spec"]["replicas"] = 5
    kube = TwoPoolKube(body, expandable=False)
    kube.replicas = 3
    kube.pod_map = {f"demo-{i}": PodObservation(f"demo-{i}") for i in range(3)}
    run_passes(kube, 1)
    sizes = [c for c in kube.status["conditions"] if c["type"] == "StorageSize"]
    assert len(sizes) == 1, sizes
    assert (sizes[0]["status"], sizes[0]["reason"]) == ("False", "ExpansionNotSupported")
    assert "; non-voters: " in sizes[0]["message"]


def test_the_storage_condition_is_the_voters_unless_the_non_voters_are_not_as_asked() -> None:
    fine = volumes.VolumePlan("1Gi", condition=Condition("StorageSize", True, "AsRequested", "ok"))
    growing = volumes.VolumePlan("1Gi", condition=Condition("StorageSize", False, "Expanding", "growing"))
    assert volumes.storage_condition(fine, volumes.VolumePlan("1Gi")) == fine.condition
    assert volumes.storage_condition(fine, growing) == growing.condition
    assert volumes.storage_condition(growing, fine) == growing.condition
    assert volumes.storage_condition(volumes.VolumePlan("1Gi"), volumes.VolumePlan("1Gi")) is None
    both = volumes.storage_condition(growing, growing)
    assert both is not None and (both.status, both.reason, both.message) == (
        False,
        "Expanding",
        "growing; non-voters: growing",
    )
