"""The safety core: Zen2's CoordinationState, after the ZenWithTerms TLA+ model.

Every transition either succeeds or raises `CoordinationStateRejected` and changes nothing. Persistent
changes go through `PersistedState` before the transition returns, so a reply that depends on them is
only ever sent after they are durable.
"""

from __future__ import annotations

from typing import Protocol

from msgspec.structs import replace

from coordinated.coordination.counters import LONG_MAX, Reach
from coordinated.coordination.messages import ApplyCommit, Join, PublishResponse
from coordinated.coordination.quorum import joint_quorum
from coordinated.coordination.state import ClusterState, VotingConfiguration


class CoordinationStateRejected(Exception):
    """A message was not valid in the current state; nothing changed."""


class PersistedState(Protocol):
    """Durable storage for the current term and the last-accepted state.

    Each setter returns only once the value is durable, or raises OSError and leaves the old value.
    """

    @property
    def current_term(self) -> int: ...

    @property
    def last_accepted_state(self) -> ClusterState: ...

    def set_current_term(self, term: int) -> None: ...

    def set_last_accepted_state(self, state: ClusterState) -> None: ...


class InMemoryPersistedState:
    def __init__(self, term: int, state: ClusterState) -> None:
        self._term = term
        self._state = state

    @property
    def current_term(self) -> int:
        return self._term

    @property
    def last_accepted_state(self) -> ClusterState:
        return self._state

    def set_current_term(self, term: int) -> None:
        self._term = term

    def set_last_accepted_state(self, state: ClusterState) -> None:
        self._state = state


def is_election_quorum(state: ClusterState, votes: set[str] | frozenset[str]) -> bool:
    return joint_quorum(state.last_committed_config, state.last_accepted_config, votes)


class CoordinationState:
    def __init__(self, local_node_id: str, persisted: PersistedState) -> None:
        self.local_node_id = local_node_id
        self.persisted = persisted
        self.join_votes: dict[str, Join] = {}
        # Votes are not persisted, so after a reboot a node must move to a new term before counting any.
        self.start_join_since_last_reboot = False
        self.election_won = False
        self.last_published_version = 0
        self.last_published_config = VotingConfiguration()
        self.publish_votes: set[str] = set()
        # How far a term or a published version from outside may move this node (see `counters`).
        self.term_reach = Reach("term")
        self.version_reach = Reach("publication version")

    @property
    def current_term(self) -> int:
        return self.persisted.current_term

    @property
    def last_accepted_state(self) -> ClusterState:
        return self.persisted.last_accepted_state

    @property
    def last_accepted_term(self) -> int:
        return self.last_accepted_state.term

    @property
    def last_accepted_version(self) -> int:
        return self.last_accepted_state.version

    @property
    def last_committed_config(self) -> VotingConfiguration:
        return self.last_accepted_state.last_committed_config

    @property
    def last_accepted_config(self) -> VotingConfiguration:
        return self.last_accepted_state.last_accepted_config

    def is_election_quorum(self, votes: set[str] | frozenset[str]) -> bool:
        return is_election_quorum(self.last_accepted_state, votes)

    def is_publish_quorum(self, votes: set[str]) -> bool:
        return joint_quorum(self.last_committed_config, self.last_published_config, votes)

    def contains_join_vote_from(self, node_id: str) -> bool:
        return node_id in self.join_votes

    # -- transitions -------------------------------------------------------------------------------------

    def set_initial_state(self, state: ClusterState) -> None:
        """Bootstrap: give a fresh node its initial voting configuration. Only allowed once."""
        if not self.last_accepted_config.is_empty():
            raise CoordinationStateRejected("initial configuration already set")
        if state.term != 0 or state.version != 0 or self.last_accepted_version != 0:
            raise CoordinationStateRejected("initial state must have term 0 and version 0")
        if state.last_accepted_config.is_empty():
            raise CoordinationStateRejected("initial state must have a voting configuration")
        self.persisted.set_last_accepted_state(state)

    def handle_start_join(self, candidate_id: str, term: int) -> Join:
        if term <= self.current_term:
            raise CoordinationStateRejected(f"incoming term {term} not greater than current term {self.current_term}")
        too_far = self.term_reach.problem(term, self.current_term)
        if too_far is not None:
            raise CoordinationStateRejected(too_far)
        self.persisted.set_current_term(term)
        self.join_votes = {}
        self.start_join_since_last_reboot = True
        self.election_won = False
        self.last_published_version = 0
        self.last_published_config = self.last_accepted_config
        self.publish_votes = set()
        return Join(
            voter_id=self.local_node_id,
            target_id=candidate_id,
            term=term,
            last_accepted_term=self.last_accepted_term,
            last_accepted_version=self.last_accepted_version,
        )

    def handle_join(self, join: Join) -> bool:
        """Count a vote. Returns True if it is a new vote."""
        if join.target_id != self.local_node_id:
            raise CoordinationStateRejected(f"join targets {join.target_id}, not this node")
        if join.term != self.current_term:
            raise CoordinationStateRejected(f"join is for term {join.term}, current term is {self.current_term}")
        if not self.start_join_since_last_reboot:
            raise CoordinationStateRejected("cannot count votes before joining a term since the last reboot")
        if join.last_accepted_term > self.last_accepted_term:
            raise CoordinationStateRejected(
                f"voter's last accepted term {join.last_accepted_term} is newer than {self.last_accepted_term}"
            )
        if (
            join.last_accepted_term == self.last_accepted_term
            and join.last_accepted_version > self.last_accepted_version
        ):
            raise CoordinationStateRejected(
                f"voter's last accepted version {join.last_accepted_version} is newer than "
                f"{self.last_accepted_version} in term {self.last_accepted_term}"
            )
        if self.last_accepted_config.is_empty():
            raise CoordinationStateRejected("cannot count votes: this node has no voting configuration yet")
        added = join.voter_id not in self.join_votes
        self.join_votes[join.voter_id] = join
        won_before = self.election_won
        self.election_won = self.is_election_quorum(set(self.join_votes))
        if self.election_won and not won_before:
            self.last_published_version = self.last_accepted_version
        return added

    def handle_client_value(self, state: ClusterState) -> None:
        """Start publishing a new state (the coordinator decides how to send it: whole or as a diff)."""
        if not self.election_won:
            raise CoordinationStateRejected("election not won")
        if state.term != self.current_term:
            raise CoordinationStateRejected(f"state term {state.term} is not the current term {self.current_term}")
        if state.version <= self.last_published_version:
            raise CoordinationStateRejected(
                f"state version {state.version} not newer than last published version {self.last_published_version}"
            )
        if state.version > LONG_MAX:
            raise CoordinationStateRejected(f"state version {state.version} is past the largest 64-bit version")
        if (
            state.last_accepted_config != self.last_accepted_config
            and self.last_committed_config != self.last_accepted_config
        ):
            raise CoordinationStateRejected("only one reconfiguration may be uncommitted at a time")
        if state.last_committed_config != self.last_committed_config:
            raise CoordinationStateRejected("a publication cannot change the last committed configuration")
        if not state.last_accepted_config.has_quorum(set(self.join_votes)):
            raise CoordinationStateRejected("the join votes have no quorum in the new configuration")
        self.last_published_version = state.version
        self.last_published_config = state.last_accepted_config
        self.publish_votes = set()

    def handle_publish_request(self, state: ClusterState) -> PublishResponse:
        if state.term != self.current_term:
            raise CoordinationStateRejected(
                f"publication term {state.term} is not the current term {self.current_term}"
            )
        if state.term == self.last_accepted_term and state.version <= self.last_accepted_version:
            raise CoordinationStateRejected(
                f"publication version {state.version} is not newer than accepted version {self.last_accepted_version}"
            )
        too_far = self.version_reach.problem(state.version, self.last_accepted_version)
        if too_far is not None:
            raise CoordinationStateRejected(too_far)
        self.persisted.set_last_accepted_state(state)
        return PublishResponse(source_id=self.local_node_id, term=state.term, version=state.version, ok=True)

    def handle_publish_response(self, source_id: str, term: int, version: int) -> ApplyCommit | None:
        """Count an ack; returns the commit once the publication first reaches a quorum."""
        if not self.election_won:
            raise CoordinationStateRejected("election not won")
        if term != self.current_term:
            raise CoordinationStateRejected(f"ack for term {term}, current term is {self.current_term}")
        if version != self.last_published_version:
            raise CoordinationStateRejected(
                f"ack for version {version}, last published is {self.last_published_version}"
            )
        had_quorum = self.is_publish_quorum(self.publish_votes)
        self.publish_votes.add(source_id)
        if not had_quorum and self.is_publish_quorum(self.publish_votes):
            return ApplyCommit(source_id=self.local_node_id, term=term, version=version)
        return None

    def handle_commit(self, commit: ApplyCommit) -> None:
        if commit.term != self.current_term:
            raise CoordinationStateRejected(f"commit for term {commit.term}, current term is {self.current_term}")
        if commit.term != self.last_accepted_term:
            raise CoordinationStateRejected(
                f"commit for term {commit.term}, accepted term is {self.last_accepted_term}"
            )
        if commit.version != self.last_accepted_version:
            raise CoordinationStateRejected(
                f"commit for version {commit.version}, accepted version is {self.last_accepted_version}"
            )
        state = self.last_accepted_state
        coordination = state.coordination
        if coordination.last_committed_config != coordination.last_accepted_config or not state.cluster_uuid_committed:
            committed = state.replace(
                cluster_uuid_committed=True,
                coordination=replace(coordination, last_committed_config=coordination.last_accepted_config),
            )
            self.persisted.set_last_accepted_state(committed)

    def invariant(self) -> None:
        """The model's invariants; raises AssertionError with what is broken."""
        if self.last_accepted_term > self.current_term:
            raise AssertionError(f"accepted term {self.last_accepted_term} > current term {self.current_term}")
        if self.election_won != self.is_election_quorum(set(self.join_votes)):
            raise AssertionError("election_won disagrees with the join votes")
        if self.election_won and self.last_published_version < self.last_accepted_version:
            raise AssertionError("a leader published below its accepted version")
        if self.join_votes and not self.start_join_since_last_reboot:
            raise AssertionError("votes counted without joining a term since the reboot")
        for join in self.join_votes.values():
            if join.term != self.current_term or join.target_id != self.local_node_id:
                raise AssertionError(f"stale vote {join}")
