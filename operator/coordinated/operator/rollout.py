"""A rolling restart the operator stopped (planner.py decides when): what the status records of it, its condition
and its Events. Pure: the planner's action, the previous status and the time in.

`status.rollout` names the pod template that could not run (a hash of the template the spec asks for), the
StatefulSet revision the pods went back to, the pod and why. It holds as long as the spec asks for that same
template, so an operator restarted meanwhile goes on from it; any other spec (a revert, or a newer change)
clears it, and the roll proceeds with the new template.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coordinated.operator.observation import Observation
from coordinated.operator.planner import Action, ActionKind
from coordinated.operator.status import Condition

CONDITION = "RolloutBlocked"


def section(
    obs: Observation, action: Action, template_hash: str, previous: Mapping[str, Any], now: str
) -> dict[str, Any] | None:
    """`status.rollout` after this pass (None: no roll is stopped)."""
    if action.kind is ActionKind.BLOCK_ROLLOUT:
        return {
            "blockedTemplate": template_hash,
            "revision": action.revision,
            "pod": action.nodes[0] if action.nodes else None,
            "reason": action.reason,
            "since": now,
        }
    if obs.rollout_blocked is not None:
        return dict(previous.get("rollout") or {})
    return None


def condition(blocked: Mapping[str, Any] | None) -> Condition:
    if blocked:
        return Condition(CONDITION, True, "Unschedulable", str(blocked.get("reason") or "the rolling restart stopped"))
    return Condition(CONDITION, False, "NotBlocked", "no rolling restart is stopped")


def events(previous: Mapping[str, Any], blocked: Mapping[str, Any] | None) -> list[tuple[str, str, str]]:
    """One Warning when a roll stops, one Event when the spec changed and the roll may go on."""
    before = previous.get("rollout") or None
    if blocked and (before or {}).get("blockedTemplate") != blocked.get("blockedTemplate"):
        return [("Warning", "RolloutBlocked", str(blocked.get("reason")))]
    if before and not blocked:
        return [("Normal", "RolloutUnblocked", "the spec changed: the rolling restart goes on with its pod template")]
    return []
