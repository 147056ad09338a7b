"""events.py: one Event per change of a condition that reports a problem, never one per pass."""

from __future__ import annotations

from typing import Any

from coordinated.operator import events
from coordinated.operator.status import Condition


def status_with(*conditions: Condition) -> dict[str, Any]:
    return {
        "conditions": [
            {"type": c.type, "status": "True" if c.status else "False", "reason": c.reason, "message": c.message}
            for c in conditions
        ]
    }


def test_a_placement_problem_is_announced_when_it_appears_changes_and_is_fixed() -> None:
    shared = Condition("VotersSpread", False, "SharedNode", "d-0 and d-1 share node n1")
    assert events.condition_events({}, [shared], None) == [("Warning", "VotersNotSpread", shared.message)]
    assert events.condition_events(status_with(shared), [shared], None) == []  # the next pass: nothing new
    other = Condition("VotersSpread", False, "SharedNode", "d-1 and d-2 share node n2")
    assert events.condition_events(status_with(shared), [other], None) == [
        ("Warning", "VotersNotSpread", other.message)
    ]
    spread = Condition("VotersSpread", True, "Spread", "3 voter(s) on 3 Kubernetes node(s)")
    assert events.condition_events(status_with(shared), [spread], None) == [("Normal", "VotersSpread", spread.message)]
    assert events.condition_events({}, [spread], None) == []  # fine from the start: nothing to say
    stuck = Condition("PodsScheduled", False, "Unschedulable", "d-2 cannot be scheduled: 0/1 nodes are available")
    assert events.condition_events({}, [stuck], None) == [("Warning", "Unschedulable", stuck.message)]


def test_a_quorum_lost_for_good_is_announced_once() -> None:
    message = "the quorum is lost for good: ..."
    assert events.condition_events({}, [], message) == [("Warning", "QuorumLost", message)]
    already = status_with(Condition("Quorate", False, "QuorumLost", message))
    assert events.condition_events(already, [], message) == []
