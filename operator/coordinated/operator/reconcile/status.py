"""Step: the status subresource. Adds where the pods run (placement.py's conditions) to the conditions the
earlier steps found, announces each change of a condition once (events.py), and hands the driver the status
to write once those Events are posted."""

from __future__ import annotations

import datetime

from coordinated.operator import events, manifests, placement, rollout
from coordinated.operator.reconcile.context import Context, StepResult
from coordinated.operator.status import compute_status


async def step(ctx: Context) -> StepResult:
    spec, obs, action, previous = ctx.spec, ctx.obs, ctx.decided, ctx.previous_status
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    voter_nodes = {name: pod.node_name for name, pod in obs.voter_pods.items() if pod.node_name}
    # A pod the scheduler has not placed for a moment is usually waiting for its claim to bind: not reported.
    unschedulable = {
        name: pod.unschedulable
        for name, pod in obs.pods.items()
        if pod.unschedulable and pod.unschedulable_for >= placement.UNSCHEDULABLE_GRACE_SECONDS
    }
    unscheduled_voters = {name: message for name, message in unschedulable.items() if obs.pods[name].voting}
    spread = placement.voters_spread(voter_nodes, ctx.seen.zones, unscheduled_voters)
    stopped = rollout.section(obs, action, ctx.seen.template_hash, previous, now)
    found = (*([spread] if spread else []), placement.pods_scheduled(unschedulable), rollout.condition(stopped))
    conditions = [*ctx.conditions, *found]
    members = ctx.members
    announced = (
        *events.condition_events(previous, conditions, quorum_lost=members.quorum_lost if members else None),
        *rollout.events(previous, stopped),
        *events.spec_events(spec, obs, action, previous),
    )
    status = compute_status(
        obs,
        action,
        generation=spec.generation,
        selector=manifests.node_selector_string(spec),
        previous=previous,
        now=now,
        problems=ctx.problems,
        extra_conditions=conditions,
        members=members,
    )
    return StepResult(events=announced, status={**status, "rollout": stopped})
