"""Step: growing the data volumes in place when `storage.size` is raised (volumes.py decides, as ECK's
pvc_expansion does): the claims are asked for the new size, then, once nothing else is under way, the
StatefulSet is deleted orphaning its pods and claims, so that the children step creates it again with the
larger claim template."""

from __future__ import annotations

from coordinated.operator import manifests, volumes
from coordinated.operator.kube import Kube
from coordinated.operator.planner import ActionKind
from coordinated.operator.reconcile.context import Context, StepResult
from coordinated.operator.spec import ClusterSpec


async def step(ctx: Context) -> StepResult:
    spec, kube = ctx.spec, ctx.kube
    voters_plan, nonvoters_plan = ctx.seen.volume_plans
    storage = volumes.storage_condition(voters_plan, nonvoters_plan)
    conditions = (storage,) if storage is not None else ()
    if not ctx.acting:
        return StepResult(conditions=conditions)
    may_recreate = ctx.decided.kind is ActionKind.NONE
    await grow(kube, spec, voters_plan, manifests.statefulset_name(spec), may_recreate)
    await grow(kube, spec, nonvoters_plan, manifests.nonvoter_statefulset_name(spec), may_recreate)
    growing = [p.condition for p in (voters_plan, nonvoters_plan) if p.condition and p.condition.reason == "Expanding"]
    # Not converged until the volumes have grown, and followed up like any wait (no pod event comes).
    return StepResult(conditions=conditions, requeue=growing[0].message if growing else None)


async def grow(kube: Kube, spec: ClusterSpec, plan: volumes.VolumePlan, statefulset: str, may_recreate: bool) -> None:
    """Raises the claims the plan names, then (once nothing else is under way) deletes the StatefulSet, orphaning
    its pods and claims, so that the next pass creates it with the larger claim template."""
    for claim in plan.expand:
        await kube.resize_claim(claim, spec.namespace, spec.storage.size)
    if plan.recreate_statefulset and may_recreate:
        await kube.orphan_statefulset(statefulset, spec.namespace)
