"""Step: the status subresource. Adds where the pods run (placement.py's conditions) to the conditions the
earlier steps found, announces each change of a condition once (events.py), and hands the driver the status
to write once those Events are posted."""

from __future__ import annotations

import datetime

from coordinated.operator import events, manifests, placement
from coordinated.operator.reconcile.context import Context, StepResult
from coordinated.operator.status import compute_status


async def step(ctx: Context) -> StepResult:
    spec, obs, action, previous = ctx.spec, ctx.obs, ctx.decided, ctx.previous_status
    voter_nodes = {name: pod.node_name for name, pod in obs.voter_pods.items() if pod.node_name}
    unschedulable = {name: pod.unschedulable for name, pod in obs.pods.items() if pod.unschedulable}
    spread = placement.voters_spread(voter_nodes, ctx.seen.zones)
    found = (*([spread] if spread else []), placement.pods_scheduled(unschedulable))
    conditions = [*ctx.conditions, *found]
    members = ctx.members
    announced = (
        *events.condition_events(previous, conditions, quorum_lost=members.quorum_lost if members else None),
        *events.spec_events(spec, obs, action, previous),
    )
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
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
    return StepResult(events=announced, status=status)
