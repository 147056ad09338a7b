"""Step: what the cluster looks like now (its StatefulSets, pods, claims, Kubernetes nodes and sidecars), and the
planner's single next action, or a refusal when the spec is invalid."""

from __future__ import annotations

from coordinated.operator import manifests, placement, volumes
from coordinated.operator.certificates import parse_duration
from coordinated.operator.kube import Kube
from coordinated.operator.observation import ClaimObservation, Observation, StatefulSetObservation
from coordinated.operator.planner import Action, ActionKind, plan
from coordinated.operator.reconcile.context import Context, Observed, StepResult
from coordinated.operator.reconcile.sidecars import observe_sidecars
from coordinated.operator.spec import HIBERNATION_SNAPSHOT_ANNOTATION, ClusterSpec


async def step(ctx: Context) -> StepResult:
    spec, kube = ctx.spec, ctx.kube
    statefulset = await ctx.reads.statefulset(manifests.statefulset_name(spec))
    nonvoter_set = await ctx.reads.statefulset(manifests.nonvoter_statefulset_name(spec))
    statefulset_replicas = statefulset.replicas if statefulset is not None else None
    pods = await ctx.reads.pods()
    view = await observe_sidecars(ctx.http, spec, pods, ctx.secured)
    voter_claims, nonvoter_claims = await data_claims(kube, spec)
    existing_claims: tuple[str, ...] = ()
    if spec.recorded_cluster_uuid is None and not spec.pinned_initial_master_nodes and statefulset_replicas is None:
        existing_claims = tuple(claim.name for claim in voter_claims)
    volume_plans = (
        await plan_volumes(kube, spec, statefulset, voter_claims),
        await plan_volumes(kube, spec, nonvoter_set, nonvoter_claims),
    )
    zones = await kube.zones(frozenset(pod.node_name for pod in pods.values() if pod.node_name))
    requested = spec.scheduling.priority_class_name
    priority_class, twin_class = placement.pod_priority_class(
        requested, await kube.priority_class(requested) if requested else None
    )
    template_hash = manifests.template_hash(
        manifests.statefulset(spec, 0, ctx.secured.tls_source, priority_class_name=priority_class)
    )
    rollout = ctx.previous_status.get("rollout") or {}
    obs = Observation(
        statefulset_name=manifests.statefulset_name(spec),
        desired_replicas=spec.voters,
        statefulset_replicas=statefulset_replicas,
        pods=pods,
        cluster=view,
        pinned_initial_master_nodes=spec.pinned_initial_master_nodes,
        recorded_cluster_uuid=spec.recorded_cluster_uuid,
        paused=spec.paused,
        existing_claims=existing_claims,
        adopted_claims=spec.adopted_claims,
        update_revision=statefulset.update_revision if statefulset is not None else None,
        statefulset_deleting=statefulset is not None and statefulset.deleting,
        desired_nonvoters=spec.non_voters,
        nonvoter_statefulset_replicas=nonvoter_set.replicas if nonvoter_set is not None else None,
        nonvoter_update_revision=nonvoter_set.update_revision if nonvoter_set is not None else None,
        hibernated_voters=spec.hibernated_voters,
        snapshot_before_hibernation=(
            spec.hibernating and spec.snapshots is not None and HIBERNATION_SNAPSHOT_ANNOTATION not in spec.annotations
        ),
        rollout_blocked=rollout.get("revision") if rollout.get("blockedTemplate") == template_hash else None,
        unschedulable_timeout=parse_duration(spec.rollout.unschedulable_timeout).total_seconds(),
    )
    ctx.observed = Observed(
        statefulset, nonvoter_set, obs, volume_plans, zones, priority_class, twin_class, template_hash
    )
    if ctx.problems:
        ctx.action = Action(ActionKind.REFUSE, "invalid spec: " + "; ".join(ctx.problems), statefulset_replicas)
    else:
        ctx.action = plan(obs)
    return StepResult()


async def data_claims(kube: Kube, spec: ClusterSpec) -> tuple[list[ClaimObservation], list[ClaimObservation]]:
    """The data claims that exist, of the voters' pods (data-NAME-N) and of the non-voters' (data-NAME-nonvoter-N)."""
    claims = await kube.claims(spec.namespace, manifests.selector_string(spec))

    def of(statefulset: str) -> list[ClaimObservation]:
        prefix = f"{manifests.DATA_VOLUME}-{statefulset}-"
        return [claim for claim in claims if claim.name.startswith(prefix) and claim.name[len(prefix) :].isdigit()]

    return of(manifests.statefulset_name(spec)), of(manifests.nonvoter_statefulset_name(spec))


async def plan_volumes(
    kube: Kube, spec: ClusterSpec, statefulset: StatefulSetObservation | None, claims: list[ClaimObservation]
) -> volumes.VolumePlan:
    storage_class = volumes.class_to_check(spec.storage.size, statefulset, claims)
    expandable = await kube.storage_class_expandable(storage_class) if storage_class else None
    return volumes.plan_volumes(spec.storage.size, statefulset, claims, expandable, storage_class)
