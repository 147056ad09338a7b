"""The CoordinationState transitions, rule by rule (docs/protocol.md)."""

from __future__ import annotations

import pytest
from msgspec.structs import replace

from coordinated.coordination.messages import ApplyCommit, Join
from coordinated.coordination.safety import CoordinationState, CoordinationStateRejected, InMemoryPersistedState
from coordinated.coordination.state import ClusterState, CoordinationMetadata, VotingConfiguration


def state(term: int, version: int, committed: list[str], accepted: list[str] | None = None) -> ClusterState:
    return ClusterState(
        cluster_name="test",
        version=version,
        state_uuid=f"{term}-{version}",
        coordination=CoordinationMetadata(
            term=term,
            last_committed_config=VotingConfiguration.of(committed),
            last_accepted_config=VotingConfiguration.of(accepted if accepted is not None else committed),
        ),
    )


def node(node_id: str, last_accepted: ClusterState, term: int = 0) -> CoordinationState:
    return CoordinationState(node_id, InMemoryPersistedState(term, last_accepted))


def vote(voter: str, target: str, term: int, accepted_term: int = 0, accepted_version: int = 0) -> Join:
    return Join(voter, target, term, accepted_term, accepted_version)


def win_election(cs: CoordinationState, voters: list[str], term: int) -> None:
    own = cs.handle_start_join(cs.local_node_id, term)
    cs.handle_join(own)
    for voter in voters:
        cs.handle_join(vote(voter, cs.local_node_id, term))


def test_start_join_needs_a_higher_term_and_persists_it() -> None:
    cs = node("a", state(0, 0, ["a", "b", "c"]), term=5)
    with pytest.raises(CoordinationStateRejected):
        cs.handle_start_join("b", 5)
    join = cs.handle_start_join("b", 6)
    assert cs.persisted.current_term == 6
    assert join == Join("a", "b", 6, 0, 0)


def test_votes_count_only_in_the_current_term_and_win_on_a_quorum() -> None:
    cs = node("a", state(0, 0, ["a", "b", "c"]))
    cs.handle_start_join("a", 1)
    with pytest.raises(CoordinationStateRejected):
        cs.handle_join(vote("b", "a", 2))
    cs.handle_join(vote("a", "a", 1))
    assert not cs.election_won
    cs.handle_join(vote("b", "a", 1))
    assert cs.election_won
    cs.invariant()


def test_a_rebooted_node_cannot_count_votes_before_joining_a_new_term() -> None:
    persisted = InMemoryPersistedState(3, state(0, 0, ["a", "b", "c"]))
    rebooted = CoordinationState("a", persisted)
    with pytest.raises(CoordinationStateRejected, match="since the last reboot"):
        rebooted.handle_join(vote("b", "a", 3))
    rebooted.handle_start_join("a", 4)
    rebooted.handle_join(vote("b", "a", 4))


def test_votes_from_voters_with_newer_state_are_refused() -> None:
    cs = node("a", state(2, 10, ["a", "b", "c"]), term=2)
    cs.handle_start_join("a", 3)
    with pytest.raises(CoordinationStateRejected, match="term"):
        cs.handle_join(vote("b", "a", 3, accepted_term=3, accepted_version=1))
    with pytest.raises(CoordinationStateRejected, match="version"):
        cs.handle_join(vote("b", "a", 3, accepted_term=2, accepted_version=11))
    cs.handle_join(vote("b", "a", 3, accepted_term=2, accepted_version=10))


def test_an_election_needs_a_quorum_of_both_configurations() -> None:
    cs = node("a", state(1, 5, committed=["a", "b", "c"], accepted=["a", "d", "e"]), term=1)
    cs.handle_start_join("a", 2)
    for voter in ["a", "b", "c"]:
        cs.handle_join(vote(voter, "a", 2, 1, 5))
    assert not cs.election_won  # a quorum of the committed config, but only one of the accepted one
    cs.handle_join(vote("d", "a", 2, 1, 5))
    assert cs.election_won


def test_publication_needs_a_quorum_of_the_committed_and_the_published_configuration() -> None:
    cs = node("a", state(0, 0, ["a", "b", "c"]))
    win_election(cs, ["b", "c", "d", "e"], term=1)
    new_state = state(1, 1, committed=["a", "b", "c"], accepted=["a", "b", "c", "d", "e"])
    cs.handle_client_value(new_state)
    assert cs.handle_publish_response("a", 1, 1) is None
    assert cs.handle_publish_response("d", 1, 1) is None
    assert cs.handle_publish_response("e", 1, 1) is None  # quorum of the new config, not of the old one
    assert cs.handle_publish_response("b", 1, 1) == ApplyCommit("a", 1, 1)


def test_only_one_reconfiguration_may_be_uncommitted() -> None:
    cs = node("a", state(1, 4, committed=["a", "b", "c"], accepted=["a", "b", "d"]), term=1)
    cs.handle_start_join("a", 2)
    for voter in ["a", "b", "c", "d"]:
        cs.handle_join(vote(voter, "a", 2, 1, 4))
    with pytest.raises(CoordinationStateRejected, match="one reconfiguration"):
        cs.handle_client_value(state(2, 5, committed=["a", "b", "c"], accepted=["a", "c", "d"]))
    cs.handle_client_value(state(2, 5, committed=["a", "b", "c"], accepted=["a", "b", "d"]))


def test_reconfiguration_needs_join_votes_from_a_quorum_of_the_new_configuration() -> None:
    cs = node("a", state(0, 0, ["a", "b", "c"]))
    win_election(cs, ["b"], term=1)
    with pytest.raises(CoordinationStateRejected, match="quorum in the new configuration"):
        cs.handle_client_value(state(1, 1, committed=["a", "b", "c"], accepted=["a", "d", "e"]))


def test_publish_requests_must_be_in_the_current_term_and_newer() -> None:
    follower = node("b", state(1, 3, ["a", "b", "c"]), term=2)
    with pytest.raises(CoordinationStateRejected):
        follower.handle_publish_request(state(1, 4, ["a", "b", "c"]))
    follower.handle_publish_request(state(2, 4, ["a", "b", "c"]))
    with pytest.raises(CoordinationStateRejected):
        follower.handle_publish_request(state(2, 4, ["a", "b", "c"]))
    assert follower.last_accepted_version == 4


def test_a_commit_applies_only_to_exactly_the_last_accepted_state() -> None:
    follower = node("b", state(0, 0, ["a", "b", "c"]), term=1)
    follower.handle_publish_request(state(1, 1, committed=["a", "b", "c"], accepted=["a", "b", "c", "d", "e"]))
    with pytest.raises(CoordinationStateRejected):
        follower.handle_commit(ApplyCommit("a", 1, 2))
    follower.handle_commit(ApplyCommit("a", 1, 1))
    assert follower.last_committed_config == VotingConfiguration.of(["a", "b", "c", "d", "e"])
    assert follower.last_accepted_state.cluster_uuid_committed


def test_a_failed_persist_changes_nothing() -> None:
    class FailingStore(InMemoryPersistedState):
        def set_current_term(self, term: int) -> None:
            raise OSError("disk full")

    cs = CoordinationState("a", FailingStore(1, state(0, 0, ["a"])))
    with pytest.raises(OSError):
        cs.handle_start_join("a", 2)
    assert cs.current_term == 1
    assert not cs.start_join_since_last_reboot


def test_invariant_detects_a_corrupted_election_flag() -> None:
    cs = node("a", state(0, 0, ["a", "b", "c"]))
    cs.handle_start_join("a", 1)
    cs.election_won = True
    with pytest.raises(AssertionError):
        cs.invariant()


def test_bootstrap_sets_the_initial_configuration_once() -> None:
    cs = node("a", ClusterState(cluster_name="test"))
    initial = state(0, 0, ["a", "b", "c"])
    cs.set_initial_state(initial)
    with pytest.raises(CoordinationStateRejected, match="already"):
        cs.set_initial_state(replace(initial, state_uuid="other"))
