"""A simulated node's storage: two state slots written alternately, as the sidecar writes its files, with the
faults a disk, an operator or a restore can cause. A restart reads the slots back through the same
`decide_startup` rule as the sidecar, so a node that must refuse to start stays down.
"""

from __future__ import annotations

import enum
import random
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

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
    LOSE_LAST_WRITE = "lose_last_write"  # the newest slot is emptied (deleted, truncated, a lost page)
    LOSE_BOTH = "lose_both"  # both slots are emptied
    ROLLBACK = "rollback"  # both slots are replaced by an older copy of themselves (the history is kept)


@dataclass(frozen=True)
class SimRecord:
    generation: int
    term: int
    state: ClusterState
    node_id: str


# A slot holds a record, the remains of a torn write, or nothing.
Slot = SimRecord | Literal["damaged"] | None

_COPIES_KEPT = 8


class FlakyPersistedState(InMemoryPersistedState):
    """Durable state that survives restarts, can be told to fail writes, and can suffer storage faults."""

    def __init__(self, cluster_name: str, rng: random.Random, node_id: str = "node") -> None:
        initial = initial_state(cluster_name)
        super().__init__(0, initial)
        self._rng = rng
        self.cluster_name = cluster_name
        self.node_id = node_id
        self.failure_rate = 0.0
        # What a failed write leaves in its slot; None draws it at random.
        self.failed_write_leaves: Literal["nothing", "torn", "complete"] | None = None
        self.slots: list[Slot] = [SimRecord(1, 0, initial, node_id), None]
        self._newest = 0
        # Earlier contents of both slots, oldest first: what a rollback puts back.
        self._copies: deque[tuple[Slot, Slot]] = deque(maxlen=_COPIES_KEPT)

    def _write(self, term: int, state: ClusterState, what: str) -> None:
        newest = self.slots[self._newest]
        assert isinstance(newest, SimRecord)
        target = 1 - self._newest
        record = SimRecord(newest.generation + 1, term, state, self.node_id)
        if self.failure_rate and self._rng.random() < self.failure_rate:
            # A failed write changes nothing the node relies on, but may leave the target slot torn, or even
            # complete (the data reached the disk but the sync reported an error).
            leaves = self.failed_write_leaves or self._rng.choice(["nothing", "torn", "complete"])
            if leaves != "nothing":
                self.slots[target] = "damaged" if leaves == "torn" else record
            raise InjectedIOError(f"injected I/O error writing {what}")
        self._copies.append((self.slots[0], self.slots[1]))
        self.slots[target] = record
        self._newest = target

    def set_current_term(self, term: int) -> None:
        self._write(term, self._state, "the term")
        super().set_current_term(term)

    def set_last_accepted_state(self, state: ClusterState) -> None:
        self._write(self._term, state, "the accepted state")
        super().set_last_accepted_state(state)

    def apply_fault(self, fault: StorageFault, rng: random.Random) -> None:
        if fault is StorageFault.LOSE_LAST_WRITE:
            records = [index for index, slot in enumerate(self.slots) if isinstance(slot, SimRecord)]
            if records:
                self.slots[max(records, key=lambda index: self._generation(index))] = None
        elif fault is StorageFault.LOSE_BOTH:
            self.slots = [None, None]
        elif self._copies:
            self.slots = list(rng.choice(list(self._copies)))

    def _generation(self, index: int) -> int:
        slot = self.slots[index]
        return slot.generation if isinstance(slot, SimRecord) else -1

    def view(self, history: HistorySummary) -> StorageView:
        return StorageView(
            cluster_name=self.cluster_name,
            node_id=self.node_id,
            node_id_name="the node id",
            slots=tuple(self._reading(index) for index in range(2)),
            history=history,
        )

    def _reading(self, index: int) -> SlotReading:
        slot = self.slots[index]
        name = f"slot {index}"
        if slot is None:
            return SlotReading(name, "empty")
        if slot == "damaged":
            return SlotReading(name, "damaged", "torn write")
        state = slot.state
        record = Record(
            generation=slot.generation,
            current_term=slot.term,
            accepted=(state.term, state.version),
            cluster_name=state.cluster_name,
            node_id=slot.node_id,
            fingerprint=f"{slot.term}/{state.state_uuid}/{state.cluster_uuid_committed}",
            initial=slot.term == 0 and state == initial_state(self.cluster_name),
        )
        return SlotReading(name, "valid", record=record)

    def reopen(self, history: HistorySummary) -> Decision:
        """What a restarted process does: read the slots back and load the record the rule picks."""
        decision = decide_startup(self.view(history))
        if isinstance(decision, LoadRecord):
            self._newest = int(decision.reading.name.removeprefix("slot "))
            record = self.slots[self._newest]
            assert isinstance(record, SimRecord)
            self._term = record.term
            self._state = record.state
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
