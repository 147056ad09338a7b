"""The invariants of one node's coordinator, which the simulator checks after every step."""

from __future__ import annotations

from coordinated.coordination.context import Mode
from coordinated.coordination.coordinator import Coordinator


def check_node_invariants(coordinator: Coordinator) -> None:
    """Raises AssertionError naming the first invariant the coordinator breaks."""
    coordinator.coordination_state.invariant()
    mode, leader, local_node = coordinator.mode, coordinator.leader, coordinator.local_node
    if mode is Mode.LEADER:
        if not coordinator.coordination_state.election_won:
            raise AssertionError("leader without an election won")
        if leader != local_node:
            raise AssertionError("leader does not name itself")
    if mode is Mode.FOLLOWER and (leader is None or leader.id == local_node.id):
        raise AssertionError("follower without another leader")
    if mode is Mode.CANDIDATE and leader is not None:
        raise AssertionError("candidate with a leader")
    applied = coordinator.applied_state
    if applied.version > coordinator.last_accepted_state.version and applied.master_node:
        raise AssertionError("applied a state newer than the last accepted one")
