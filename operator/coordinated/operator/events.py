"""The Events a pass announces beside its action's: one per change of a condition, never one per pass. Pure:
the previous status and this pass's findings in, (type, reason, message) triples out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coordinated.operator import placement, volumes
from coordinated.operator.observation import Observation
from coordinated.operator.planner import Action, ActionKind
from coordinated.operator.spec import ClusterSpec
from coordinated.operator.status import Condition, election_event

Event = tuple[str, str, str]  # (type, reason, message)


def condition_of(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in status.get("conditions") or () if c.get("type") == kind), None)


# The Events of a condition that reports a problem: (type, reason) when it turns True (fixed), and when it turns
# False or its problem changes (another reason, other pods).
CONDITION_EVENTS: dict[str, tuple[tuple[str, str], tuple[str, str]]] = {
    placement.SPREAD_CONDITION: (("Normal", "VotersSpread"), ("Warning", "VotersNotSpread")),
    placement.SCHEDULED_CONDITION: (("Normal", "PodsScheduled"), ("Warning", "Unschedulable")),
}


def condition_events(
    previous_status: Mapping[str, Any], conditions: list[Condition], quorum_lost: str | None
) -> list[Event]:
    """One Event per change of the placement conditions and of the storage size (not one per pass); a quorum
    lost for good is announced once."""
    events: list[Event] = []
    for condition in conditions:
        before = condition_of(previous_status, condition.type) or {}
        if condition.type == volumes.CONDITION:
            plan = volumes.VolumePlan("", condition=condition)
            if (event := volumes.event_for(plan, before.get("reason"))) is not None:
                events.append(event)
        elif condition.type in CONDITION_EVENTS:
            fixed, problem = CONDITION_EVENTS[condition.type]
            if condition.status and before.get("status") == "False":
                events.append((*fixed, condition.message))
            elif not condition.status and (before.get("status"), before.get("reason"), before.get("message")) != (
                "False",
                condition.reason,
                condition.message,
            ):
                events.append((*problem, condition.message))
    if quorum_lost and (condition_of(previous_status, "Quorate") or {}).get("reason") != "QuorumLost":
        events.append(("Warning", "QuorumLost", quorum_lost))
    return events


def spec_events(spec: ClusterSpec, obs: Observation, action: Action, previous_status: Mapping[str, Any]) -> list[Event]:
    """A new master or term, a newly refused step, and an even number of voters (once)."""
    events: list[Event] = []
    if (message := election_event(previous_status, obs)) is not None:
        events.append(("Normal", "MasterElected", message))
    last = previous_status.get("lastAction") or {}
    if action.kind is ActionKind.REFUSE and last.get("reason") != action.reason:
        events.append(("Warning", "ScalingRefused", action.reason))
    was_even = (condition_of(previous_status, "EvenReplicas") or {}).get("status") == "True"
    if spec.voters > 0 and spec.voters % 2 == 0 and not was_even:
        events.append(
            ("Warning", "EvenReplicas", f"{spec.voters} voting nodes: an odd number tolerates as many failures")
        )
    return events
