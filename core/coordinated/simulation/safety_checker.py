"""The simulator's cluster-wide safety checks: every history event as it is recorded, every applied state, and
every running node after each step. A violation raises `SafetyViolation` naming the seed and the virtual time.

What it checks (the properties the audit checks on real histories): one master per term, one state per (term,
version), each state's content the same wherever it is recorded, states naming the master elected in their
term, committed versions that never differ and always descend from each other, ephemeral keys only with their
session, one leader per term among the running nodes, and no node leading a term again after its process
ended in it (the audit settles a publication its master left uncommitted when it stopped on this).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NoReturn

from coordinated.coordination.coordinator import Coordinator, Mode
from coordinated.coordination.history import (
    NO_CLUSTER_UUID,
    RESET_EVENT_TYPES,
    STATE_EVENT_TYPES,
    EventType,
    HistoryEvent,
)
from coordinated.coordination.state import ClusterState
from coordinated.simulation.node_invariants import check_node_invariants

# What the checker compares of a state wherever it is recorded: term, version, parent, master, accepted config.
StateContent = tuple[int, int, str | None, str | None, tuple[str, ...]]


class SafetyViolation(AssertionError):
    pass


class SafetyChecker:
    """`clock` gives the virtual time to name in a violation."""

    def __init__(self, seed: int, clock: Callable[[], int]) -> None:
        self.seed = seed
        self._clock = clock
        # Per cluster UUID (a node of another cluster may be present): who won each term, the state of each
        # (term, version), and the committed states by version as (term, state_uuid).
        self._elected: dict[tuple[str, int], str] = {}
        self._state_by_version: dict[tuple[str, int, int], str] = {}
        self._committed: dict[str, dict[int, tuple[int, str]]] = {}
        self._parents: dict[str, tuple[str | None, int]] = {}
        # A node's copy of a state that `remove_settings` rewrote offline -> the state it stands for.
        self._rewritten: dict[str, str | None] = {}
        # What each state_uuid was recorded with, as the audit's unique-state-per-version compares it.
        self._content: dict[tuple[str, str], StateContent] = {}
        self._committed_config: dict[tuple[str, str], tuple[str, ...]] = {}
        self._unknown_uuid_owner: dict[int, str] = {}
        # Sessions, as the applied (committed) states show them: when each was created (its version), and
        # when a node first applied a later state without it.
        self._session_created: dict[str, int] = {}
        self.session_ended_at: dict[str, int] = {}
        # Node id -> its current term when its process last ended: it may lead only later terms after that.
        self._ended_in_term: dict[str, int] = {}

    def violation(self, message: str) -> NoReturn:
        raise SafetyViolation(f"[seed {self.seed}, t={self._clock()}ms] {message}")

    def process_ended(self, node_id: str, term: int) -> None:
        """A node's process ended in `term` (a crash here; a real node's graceful stop records `stopped`)."""
        self._ended_in_term[node_id] = max(term, self._ended_in_term.get(node_id, 0))

    def _check_leads_after_its_end(self, event: HistoryEvent) -> None:
        ended = self._ended_in_term.get(event.node)
        if ended is not None and event.term <= ended:
            self.violation(
                f"{event.node} recorded {event.type} as master in term {event.term} after its process "
                f"ended in term {ended}: a node leads only later terms once it has stopped"
            )

    def observe(self, event: HistoryEvent) -> None:
        """A history event as a node records it."""
        kind = event.type
        if kind is EventType.ELECTED or (kind is EventType.COMMITTED and event.quorum is not None):
            self._check_leads_after_its_end(event)
        if kind in RESET_EVENT_TYPES:  # the node tool's reset: a new cluster or term may follow
            self._ended_in_term.pop(event.node, None)
        if kind is EventType.ELECTED:
            term = event.term
            winner = self._elected.setdefault((event.cluster_uuid, term), event.node)
            if winner != event.node:
                self.violation(f"two masters elected in term {term}: {winner} and {event.node}")
        elif kind in STATE_EVENT_TYPES:
            if event.state_uuid is None or event.version is None:
                self.violation(f"a {kind} event of {event.node} names no state_uuid or version")
            self._observe_state(event, event.state_uuid, event.version)
        elif kind is EventType.SETTINGS_REMOVED and event.state_uuid is not None:
            # The same (term, version) as the state it replaced, under a new uuid: it stands for that state.
            self._rewritten[event.state_uuid] = event.parent_uuid

    def _observe_state(self, event: HistoryEvent, state_uuid: str, version: int) -> None:
        cluster_uuid = event.cluster_uuid
        key = (cluster_uuid, event.term, version)
        uuid = self._state_by_version.setdefault(key, state_uuid)
        if uuid != state_uuid:
            self.violation(f"two states for (term, version) {key}: {uuid} and {state_uuid}")
        master = self._elected.get((cluster_uuid, event.term))
        # A first election is recorded before the cluster UUID exists; it belongs to the first cluster seen
        # in that term, not to a state of another cluster that a node loaded from its storage.
        if (
            master is None
            and (NO_CLUSTER_UUID, event.term) in self._elected
            and self._unknown_uuid_owner.setdefault(event.term, cluster_uuid) == cluster_uuid
        ):
            master = self._elected[(NO_CLUSTER_UUID, event.term)]
        if master is not None and event.master != master:
            self.violation(f"state {key} names master {event.master} but {master} was elected")
        self._parents[state_uuid] = (event.parent_uuid, version)
        self._check_content(event, state_uuid, version)
        if event.type in (EventType.COMMITTED, EventType.APPLIED):
            self._check_committed(self._committed.setdefault(cluster_uuid, {}), event.term, state_uuid, version)

    def _check_content(self, event: HistoryEvent, state_uuid: str, version: int) -> None:
        """Every event of one state_uuid carries the same state. A commit makes the last-committed configuration
        equal to the last-accepted one, so a `committed` or `applied` event may carry that marked form."""
        key = (event.cluster_uuid, state_uuid)
        content: StateContent = (event.term, version, event.parent_uuid, event.master, event.last_accepted_config)
        known = self._content.setdefault(key, content)
        if known != content:
            self.violation(f"state {key[1]} recorded with different content: {known} and {content}")
        committed_config = event.last_committed_config
        if event.type is EventType.ACCEPTED or committed_config != event.last_accepted_config:
            first = self._committed_config.setdefault(key, committed_config)
            if first != committed_config:
                self.violation(
                    f"state {key[1]} recorded with last_committed_config {first} and {committed_config} "
                    f"(a {event.type} event on {event.node})"
                )

    def _check_committed(self, committed: dict[int, tuple[int, str]], term: int, uuid: str, version: int) -> None:
        known = committed.get(version)
        if known is not None:
            if known[1] != uuid:
                self.violation(f"two committed states at version {version}: {known[1]} and {uuid}")
            return
        committed[version] = (term, uuid)
        versions = sorted(committed)
        position = versions.index(version)
        if position > 0:
            self._check_descends(committed, versions[position - 1], version)
        if position + 1 < len(versions):
            self._check_descends(committed, version, versions[position + 1])

    def _check_descends(self, committed: dict[int, tuple[int, str]], older_version: int, newer_version: int) -> None:
        older_term, older_uuid = committed[older_version]
        newer_term, current = committed[newer_version]
        if newer_term < older_term:
            self.violation(f"committed term went back from {older_term} to {newer_term} at version {newer_version}")
        uuid: str | None = current
        while uuid is not None and uuid in self._parents:
            parent, version = self._parents[uuid]
            if version <= older_version:
                break
            uuid = parent
        while uuid is not None and uuid in self._rewritten:
            uuid = self._rewritten[uuid]
        if uuid != older_uuid:
            self.violation(f"committed version {newer_version} does not descend from committed version {older_version}")

    def check_applied(self, state: ClusterState) -> None:
        """An ephemeral key exists only with its session: ending a session deletes its keys in that state.
        Also notes when each session first disappears from an applied state."""
        for key, session in state.kv_sessions.items():
            if session not in state.sessions or key not in state.kv:
                self.violation(f"version {state.version} holds ephemeral key {key} of ended session {session}")
        if state.master_node is None or (not state.sessions and not self._session_created):
            return  # a no-master view may be a node's last-accepted state, loaded at start and not committed
        for session_id, held in state.sessions.items():
            self._session_created.setdefault(session_id, held.create_version)
        for session_id, created in self._session_created.items():
            if session_id not in state.sessions and state.version > created:
                self.session_ended_at.setdefault(session_id, self._clock())

    def check_running(self, running: Iterable[tuple[str, Coordinator]]) -> None:
        """Each running node's own invariants, and one leader per term among them."""
        running = list(running)
        for name, coordinator in running:
            try:
                check_node_invariants(coordinator)
            except AssertionError as error:
                self.violation(f"{name}: {error}")
        leaders: dict[tuple[str, int], str] = {}
        for name, coordinator in running:
            if coordinator.mode is Mode.LEADER:
                term = (coordinator.last_accepted_state.cluster_uuid, coordinator.current_term)
                if term in leaders:
                    self.violation(f"two leaders in term {term}: {leaders[term]} and {name}")
                leaders[term] = name
