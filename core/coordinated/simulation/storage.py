"""A simulated node's storage: one database of commits, as the sidecar's SQLite store, with the faults a disk, an
operator or a restore can cause. A restart reads it back through the same `decide_startup` rule as the
sidecar, so a node that must refuse to start stays down.

What the model keeps of the real store: a write is one commit, durable when it returns; a crash in the middle
of a commit leaves a torn WAL tail that the next open drops (so a failed write leaves nothing, or, when the
data reached the disk but the sync reported an error, the complete commit); and the faults are the WAL's tail
lost (the newest commit gone), the database lost, and the database replaced by an older copy.
"""

from __future__ import annotations

import enum
import random
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from coordinated.coordination.counters import LONG_MAX
from coordinated.coordination.recovery import (
    Decision,
    HistorySummary,
    LoadRecord,
    Record,
    SlotReading,
    StorageView,
    decide_startup,
)
from coordinated.coordination.safety import InMemoryPersistedState
from coordinated.coordination.state import ClusterState, initial_state


class InjectedIOError(OSError):
    pass


class StorageFault(enum.Enum):
    LOSE_LAST_WRITE = "lose_last_write"  # the WAL's tail is lost: the newest commit is gone
    LOSE_BOTH = "lose_both"  # the database and its WAL are lost
    ROLLBACK = "rollback"  # the database is replaced by an older copy of itself (the history is kept)


@dataclass(frozen=True)
class SimRecord:
    generation: int
    term: int
    state: ClusterState
    node_id: str


_COPIES_KEPT = 8
DATABASE = "the database"


class FlakyPersistedState(InMemoryPersistedState):
    """Durable state that survives restarts, can be told to fail writes, and can suffer storage faults."""

    def __init__(self, cluster_name: str, rng: random.Random, node_id: str = "node") -> None:
        initial = initial_state(cluster_name)
        super().__init__(0, initial)
        self._rng = rng
        self.cluster_name = cluster_name
        self.node_id = node_id
        self.failure_rate = 0.0
        # What a failed write leaves; None draws it at random. A torn commit is dropped at the next open.
        self.failed_write_leaves: Literal["nothing", "torn", "complete"] | None = None
        # The commits on disk, newest last (the older ones are what a lost WAL tail falls back to); None when
        # the database is gone.
        self.commits: list[SimRecord] | None = [SimRecord(1, 0, initial, node_id)]
        # Earlier contents of the database, oldest first: what a rollback puts back.
        self._copies: deque[tuple[SimRecord, ...]] = deque(maxlen=_COPIES_KEPT)

    def _write(self, term: int, state: ClusterState, what: str) -> None:
        assert self.commits, "a node whose database is gone does not run"
        # As the sidecar's store would refuse to read it back: a number the wire cannot carry is never written.
        if max(term, state.term, state.version) > LONG_MAX:
            raise AssertionError(
                f"writing {what} with a number past {LONG_MAX}: term {term}, state {state.term_version()}"
            )
        record = SimRecord(self.commits[-1].generation + 1, term, state, self.node_id)
        if self.failure_rate and self._rng.random() < self.failure_rate:
            leaves = self.failed_write_leaves or self._rng.choice(["nothing", "torn", "complete"])
            if leaves == "complete":
                self.commits.append(record)
            raise InjectedIOError(f"injected I/O error writing {what}")
        self._copies.append(tuple(self.commits))
        self.commits = [*self.commits[-_COPIES_KEPT:], record]

    def set_current_term(self, term: int) -> None:
        self._write(term, self._state, "the term")
        super().set_current_term(term)

    def set_last_accepted_state(self, state: ClusterState) -> None:
        self._write(self._term, state, "the accepted state")
        super().set_last_accepted_state(state)

    def apply_fault(self, fault: StorageFault, rng: random.Random) -> None:
        if fault is StorageFault.LOSE_LAST_WRITE:
            if self.commits and len(self.commits) > 1:
                self.commits = self.commits[:-1]
        elif fault is StorageFault.LOSE_BOTH:
            self.commits = None
        elif self._copies:
            self.commits = list(rng.choice(list(self._copies)))

    def view(self, history: HistorySummary) -> StorageView:
        return StorageView(
            cluster_name=self.cluster_name,
            node_id=self.node_id,
            node_id_name="the node id",
            slots=(self._reading(),),
            history=history,
        )

    def _reading(self) -> SlotReading:
        if not self.commits:
            return SlotReading(DATABASE, "missing")
        newest = self.commits[-1]
        state = newest.state
        record = Record(
            generation=newest.generation,
            current_term=newest.term,
            accepted=(state.term, state.version),
            cluster_name=state.cluster_name,
            node_id=newest.node_id,
            fingerprint=f"{newest.term}/{state.state_uuid}/{state.cluster_uuid_committed}",
            initial=newest.term == 0 and state == initial_state(self.cluster_name),
        )
        return SlotReading(DATABASE, "valid", record=record)

    def stored_state(self) -> ClusterState | None:
        """The state of the newest record on disk (None: none), as a reader sees it before loading anything."""
        return self.commits[-1].state if self.commits else None

    def reopen(self, history: HistorySummary) -> Decision:
        """What a restarted process does: read the database back and load the record the rule picks."""
        decision = decide_startup(self.view(history))
        if isinstance(decision, LoadRecord):
            assert self.commits
            self._term = self.commits[-1].term
            self._state = self.commits[-1].state
        return decision


def summarize_events(events: Iterable[dict[str, Any]]) -> HistorySummary:
    """The sidecar's `summarize_history`, over a simulated node's history events."""
    term = 0
    accepted = (0, 0)
    node_ids: set[str] = set()
    count = 0
    for event in events:
        count += 1
        node_ids.add(event["node"])
        if event["type"] == "term":
            term = max(term, event["term"])
        elif event["type"] == "accepted":
            accepted = max(accepted, (event["term"], event["version"]))
    return HistorySummary(events=count, term=term, accepted=accepted, node_ids=frozenset(node_ids))
