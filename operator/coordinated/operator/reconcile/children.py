"""Step: every child object of the cluster, applied by server-side apply (so re-applying changes nothing): the
Services, the bootstrap ConfigMap, the StatefulSets at the planned sizes, the PodDisruptionBudget, the audit
CronJob and the NetworkPolicy; children the spec no longer asks for are deleted."""

from __future__ import annotations

import secrets

from coordinated.operator import manifests, membership, security
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
    )
    for child in children:
        if child["kind"] == "StatefulSet":
            voting = child["metadata"]["name"] == manifests.statefulset_name(spec)
            if voting and (action.statefulset_replicas is None or obs.statefulset_deleting):
                continue  # not before the bootstrap list is pinned, nor while it is deleted to be created again
            if not voting and (nonvoters is None or nonvoters.deleting):
                continue
        await kube.apply(child)
    kinds = {child["kind"] for child in children}
    if "PodDisruptionBudget" not in kinds:
        await kube.delete_if_present("policy/v1", "PodDisruptionBudget", spec.name, spec.namespace)
    if "CronJob" not in kinds:
        await kube.delete_if_present("batch/v1", "CronJob", manifests.audit_cronjob_name(spec), spec.namespace)
    policy = security.network_policy(spec, security.operator_peer(ctx.config.namespace, ctx.config.pod_labels))
    if policy is not None:
        await kube.apply(policy)
    else:
        name = manifests.network_policy_name(spec)
        await kube.delete_if_present("networking.k8s.io/v1", "NetworkPolicy", name, spec.namespace)
    return StepResult(events=ctx.carried_out(KINDS))
