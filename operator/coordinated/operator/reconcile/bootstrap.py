"""Step: the annotations that carry the cluster's identity across passes and restarts (Elasticsearch's
`cluster.initial_master_nodes`, pinned once; the cluster UUID once it bootstrapped; hibernation), and the
bootstrap list the ConfigMap must hold after this pass."""

from __future__ import annotations

from coordinated.operator.planner import ActionKind
from coordinated.operator.reconcile.context import Context, StepResult
from coordinated.operator.spec import (
    ADOPTED_CLAIMS_ANNOTATION,
    CLUSTER_UUID_ANNOTATION,
    HIBERNATED_VOTERS_ANNOTATION,
    HIBERNATION_SNAPSHOT_ANNOTATION,
    INITIAL_MASTER_NODES_ANNOTATION,
)

KINDS = frozenset({ActionKind.PIN_BOOTSTRAP, ActionKind.COMPLETE_BOOTSTRAP, ActionKind.HIBERNATE, ActionKind.WAKE})


async def step(ctx: Context) -> StepResult:
    if not ctx.acting:
        return StepResult()
    action, obs, spec = ctx.decided, ctx.obs, ctx.spec
    annotations: dict[str, str | None] = {}
    if action.kind is ActionKind.PIN_BOOTSTRAP:
        ctx.initial_master_nodes = action.nodes
        annotations[INITIAL_MASTER_NODES_ANNOTATION] = ",".join(action.nodes)
        if action.adopted_claims:
            annotations[ADOPTED_CLAIMS_ANNOTATION] = ",".join(action.adopted_claims)
    elif action.kind is ActionKind.COMPLETE_BOOTSTRAP or obs.recorded_cluster_uuid:
        ctx.initial_master_nodes = ()
    else:
        ctx.initial_master_nodes = obs.pinned_initial_master_nodes

    if action.kind is ActionKind.COMPLETE_BOOTSTRAP:
        annotations[CLUSTER_UUID_ANNOTATION] = action.cluster_uuid
        annotations[INITIAL_MASTER_NODES_ANNOTATION] = None  # the list is never used again
    if action.kind is ActionKind.HIBERNATE:
        annotations[HIBERNATED_VOTERS_ANNOTATION] = str(action.hibernated_voters)
    if action.kind is ActionKind.WAKE:
        annotations[HIBERNATED_VOTERS_ANNOTATION] = None
        annotations[HIBERNATION_SNAPSHOT_ANNOTATION] = None
    if annotations:
        await ctx.kube.patch_annotations(spec.namespace, spec.name, annotations)
    return StepResult(events=ctx.carried_out(KINDS))
