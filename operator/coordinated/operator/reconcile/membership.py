"""Step: the voting configuration and the members. Carries out the planner's voting exclusions (one node at a
time, asked of the master) and pod restarts, and finds the members that lost their data and came back as new
nodes (membership.py's pure rules) for the status."""

from __future__ import annotations

from coordinated.operator import events, membership
from coordinated.operator.planner import Action, ActionKind
from coordinated.operator.reconcile.context import Context, StepResult
from coordinated.operator.reconcile.sidecars import coordinator
from coordinated.operator.status import Members

KINDS = frozenset({ActionKind.EXCLUDE, ActionKind.CLEAR_EXCLUSIONS, ActionKind.RESTART})


async def step(ctx: Context) -> StepResult:
    spec, obs = ctx.spec, ctx.obs
    announced: tuple[events.Event, ...] = ()
    if ctx.acting:
        action = ctx.decided
        if action.kind is ActionKind.EXCLUDE:
            await coordinator(ctx.http, spec, obs, ctx.secured).add_voting_config_exclusions(action.nodes)
        elif action.kind is ActionKind.CLEAR_EXCLUSIONS:
            await coordinator(ctx.http, spec, obs, ctx.secured).clear_voting_config_exclusions(action.wait_for_removal)
        elif action.kind is ActionKind.RESTART and await _spec_changed_during_the_pass(ctx):
            # A revert (or any edit) landed after this pass read the spec: the restart it decided may be one the
            # new spec does not want. The pass reports a wait (so the status says what happened), and the next
            # pass decides on the new spec.
            reason = f"not restarting {', '.join(action.nodes)}: the spec changed during this pass"
            ctx.logger.info("%s", reason)
            ctx.action = Action(ActionKind.WAIT, reason, action.statefulset_replicas)
        elif action.kind is ActionKind.RESTART:
            for pod in action.nodes:
                await ctx.kube.delete_pod(pod, spec.namespace)
        announced = ctx.carried_out(KINDS)

    previous = ctx.previous_status
    previous_nodes = previous.get("nodes") or ()
    replaced = membership.replacements(obs, previous_nodes)
    finished = membership.replaced_between_passes(obs, replaced, previous_nodes)
    ctx.members = Members(
        voting_config=tuple(membership.voting_config_names(obs, replaced, previous_nodes)),
        nodes=tuple(membership.node_entries(obs, replaced, ctx.seen.zones, previous_nodes)),
        quorum_lost=membership.quorum_lost(obs, replaced),
    )
    condition = membership.replacement_condition(
        replaced, events.condition_of(previous, membership.REPLACEMENT_CONDITION), finished
    )
    replacement_events = membership.replacement_events(replaced, previous_nodes, obs, finished)
    return StepResult(conditions=(condition,), events=(*announced, *replacement_events))


async def _spec_changed_during_the_pass(ctx: Context) -> bool:
    fresh = await ctx.kube.cluster(ctx.spec.namespace, ctx.spec.name)
    generation = ctx.body.get("metadata", {}).get("generation")
    return fresh is None or fresh.get("metadata", {}).get("generation") != generation
