"""Step: every child object of the cluster, applied by server-side apply (so re-applying changes nothing): the
Services, the bootstrap ConfigMap, the StatefulSets at the planned sizes, the PodDisruptionBudget, the audit
CronJob and the NetworkPolicy; children the spec no longer asks for are deleted."""

from __future__ import annotations

import secrets

from coordinated.operator import manifests, membership, monitoring, security
from coordinated.operator.manifests import Manifest
from coordinated.operator.planner import ActionKind
from coordinated.operator.reconcile.context import Context, StepResult

KINDS = frozenset({ActionKind.SET_REPLICAS})


async def step(ctx: Context) -> StepResult:
    if not ctx.acting:
        return StepResult()
    spec, kube, action, seen = ctx.spec, ctx.kube, ctx.decided, ctx.seen
    obs = seen.obs
    voters_plan, nonvoters_plan = seen.volume_plans
    nonvoters = membership.nonvoter_layout(obs, seen.nonvoter_set, nonvoters_plan.template_size)

    await kube.create_if_absent(manifests.transport_secret(spec, secrets.token_urlsafe(48)))
    if (snapshot_claim := manifests.snapshot_claim(spec)) is not None:
        await kube.create_if_absent(snapshot_claim)  # before the pods that mount it
    if seen.twin_class is not None:
        await kube.create_if_absent(seen.twin_class)  # before the pods that name it; its value never changes
    children = manifests.desired_children(
        spec,
        replicas=action.statefulset_replicas or 0,
        initial_master_nodes=ctx.initial_master_nodes,
        health=obs.cluster.health,
        voters=len(obs.cluster.voters),
        tls_source=ctx.secured.tls_source,
        claim_size=voters_plan.template_size,
        nonvoters=nonvoters.replicas if nonvoters is not None else None,
        nonvoter_claim_size=nonvoters.claim_size if nonvoters is not None else None,
        # Hibernating or waking: a StatefulSet scaled to 0 keeps its claims, whatever whenScaled says.
        keep_claims=spec.hibernating or obs.hibernated_voters is not None,
        priority_class_name=seen.priority_class,
    )
    went_back = action.revision if action.kind is ActionKind.BLOCK_ROLLOUT else obs.rollout_blocked
    for child in children:
        if child["kind"] == "StatefulSet":
            voting = child["metadata"]["name"] == manifests.statefulset_name(spec)
            if voting and (action.statefulset_replicas is None or obs.statefulset_deleting):
                continue  # not before the bootstrap list is pinned, nor while it is deleted to be created again
            if not voting and (nonvoters is None or nonvoters.deleting):
                continue
            if voting and went_back is not None:
                child = await _with_template_of(ctx, child, went_back)
        await kube.apply(child)
    kinds = {child["kind"] for child in children}
    if "PodDisruptionBudget" not in kinds:
        await kube.delete_if_present("policy/v1", "PodDisruptionBudget", spec.name, spec.namespace)
    if "CronJob" not in kinds:
        await kube.delete_if_present("batch/v1", "CronJob", manifests.audit_cronjob_name(spec), spec.namespace)
    await _pod_monitor(ctx)
    policy = security.network_policy(spec, security.operator_peer(ctx.config.namespace, ctx.config.pod_labels))
    if policy is not None:
        await kube.apply(policy)
    else:
        name = manifests.network_policy_name(spec)
        await kube.delete_if_present("networking.k8s.io/v1", "NetworkPolicy", name, spec.namespace)
    return StepResult(events=ctx.carried_out(KINDS))


async def _with_template_of(ctx: Context, statefulset: Manifest, revision: str) -> Manifest:
    """The voters' StatefulSet with the pod template of `revision` (the last that ran, a roll being stopped):
    the StatefulSet controller finds that revision again, and a pod replaced from now on gets that template."""
    template = await ctx.kube.revision_template(revision, ctx.spec.namespace)
    if template is None:
        ctx.logger.warning("revision %s of %s is gone: the new template stays", revision, ctx.spec.name)
        return statefulset
    return {**statefulset, "spec": {**statefulset["spec"], "template": template}}


async def _pod_monitor(ctx: Context) -> None:
    """The sidecars' PodMonitor, where the Prometheus Operator is installed: applied when wanted, else deleted."""
    spec = ctx.spec
    if not await ctx.kube.serves(monitoring.API_VERSION, monitoring.KIND):
        return
    wanted = ctx.config.pod_monitors if spec.monitoring.pod_monitor is None else spec.monitoring.pod_monitor
    if wanted:
        await ctx.kube.apply(monitoring.pod_monitor(spec, ctx.secured.tls_source, ctx.config.pod_monitor_labels))
    else:
        name = monitoring.pod_monitor_name(spec)
        await ctx.kube.delete_if_present(monitoring.API_VERSION, monitoring.KIND, name, spec.namespace)
