"""The simulator's safety checker alone, fed history events by hand: each cluster-wide property it guards
raises SafetyViolation with the seed and the virtual time, and a history that keeps them passes."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from coordinated.coordination.history import HistoryEvent
from coordinated.simulation.safety_checker import SafetyChecker, SafetyViolation

CONFIG = ["a", "b", "c"]


def event(kind: str, node: str, term: int, version: int | None = None, **fields: Any) -> HistoryEvent:
    state = f"s{term}-{version}" if version is not None else None
    recorded = {
        "type": kind,
        "node": node,
        "node_name": node,
        "cluster_uuid": "u",
        "term": term,
        "version": version,
        "state_uuid": fields.pop("state_uuid", state),
        "parent_uuid": fields.pop("parent_uuid", None),
        "master": fields.pop("master", None),
        "last_accepted_config": CONFIG,
        "last_committed_config": CONFIG,
        **fields,
    }
    return msgspec.convert(recorded, HistoryEvent)  # as typed as the core records it, checked


def checker() -> SafetyChecker:
    return SafetyChecker(seed=7, clock=lambda: 1234)


def test_a_history_that_keeps_the_properties_passes() -> None:
    safety = checker()
    safety.observe(event("elected", "a", 2))
    for node in CONFIG:
        safety.observe(event("accepted", node, 2, 1, master="a"))
        safety.observe(event("committed", node, 2, 1, master="a"))
        safety.observe(event("accepted", node, 2, 2, master="a", parent_uuid="s2-1"))
        safety.observe(event("committed", node, 2, 2, master="a", parent_uuid="s2-1"))


def test_two_masters_in_one_term() -> None:
    safety = checker()
    safety.observe(event("elected", "a", 2))
    with pytest.raises(SafetyViolation, match=r"\[seed 7, t=1234ms\] two masters elected in term 2: a and b"):
        safety.observe(event("elected", "b", 2))


def test_a_state_naming_another_master_than_the_elected_one() -> None:
    safety = checker()
    safety.observe(event("elected", "a", 2))
    with pytest.raises(SafetyViolation, match="names master b but a was elected"):
        safety.observe(event("accepted", "c", 2, 1, master="b"))


def test_two_states_for_one_term_and_version() -> None:
    safety = checker()
    safety.observe(event("accepted", "a", 2, 1))
    with pytest.raises(SafetyViolation, match=r"two states for \(term, version\)"):
        safety.observe(event("accepted", "b", 2, 1, state_uuid="other"))


def test_a_committed_version_that_does_not_descend_from_the_one_before() -> None:
    safety = checker()
    safety.observe(event("committed", "a", 2, 1))
    with pytest.raises(SafetyViolation, match="committed version 2 does not descend from committed version 1"):
        safety.observe(event("committed", "a", 3, 2, parent_uuid="a fork"))


def test_a_node_that_leads_again_in_the_term_its_process_ended_in() -> None:
    # The audit settles a publication that a stopped master left uncommitted: after its process ends in term t
    # it may win or commit as master only in a later term.
    safety = checker()
    safety.observe(event("elected", "a", 2))
    safety.process_ended("a", 2)
    with pytest.raises(SafetyViolation, match="after its process ended in term 2"):
        safety.observe(event("committed", "a", 2, 1, master="a", quorum=["a", "b"]))
    with pytest.raises(SafetyViolation, match="elected as master in term 2"):
        safety.observe(event("elected", "a", 2))
    safety.observe(event("committed", "b", 2, 1, master="a"))  # a follower's commit of that term: no leading
    safety.observe(event("elected", "a", 3))  # a later term: allowed
    safety.observe(event("detached", "a", 0))  # the node tool's reset: its terms may start over
    safety.process_ended("b", 5)
    safety.observe(event("elected", "a", 1, cluster_uuid="v"))
