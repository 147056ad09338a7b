"""What a node may load from its storage when it starts, or why it must refuse to start.

Pure and shared: the sidecar describes its files with these types, the simulator describes its model of them,
and both obey the one `decide_startup`. A node that forgets a term it voted in can vote twice in that term; one
that forgets a state it acknowledged can help elect a master that lacks a committed state. So a node loads a
record only when nothing shows that it acknowledged something newer, and it starts as a new node only from
storage that shows no sign of earlier use.

The storage model: two slots hold records with a write generation; a write goes into the slot that does not hold
the newest valid record, so a crash can damage only the older copy. A node id names the node. The history
records a `term` event after each durable term and an `accepted` event after each durable accepted state, both
before the Join or ack that relies on it: the newest of each is a lower bound on what the node acknowledged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from coordinated.coordination.history import EventType, HistoryEvent
from coordinated.coordination.state import ClusterState
from coordinated.coordination.state_events import state_event

SlotKind = Literal["missing", "empty", "damaged", "valid"]


@dataclass(frozen=True)
class Record:
    """A valid record, reduced to what the rule needs."""

    generation: int
    current_term: int
    accepted: tuple[int, int]  # (term, version) of the last-accepted state
    cluster_name: str
    node_id: str | None  # None in records written before the node id was recorded in them
    fingerprint: str  # equal for equal records
    initial: bool = False  # term 0 and the empty initial state: it holds no vote and no ack


@dataclass(frozen=True)
class SlotReading:
    name: str  # how messages name it, e.g. the file's path in brackets
    kind: SlotKind
    problem: str = ""  # for "damaged"
    record: Record | None = None  # for "valid"

    def describe(self) -> str:
        if self.kind == "missing":
            return f"{self.name} is missing"
        if self.kind == "empty":
            return f"{self.name} holds no record (empty)"
        if self.kind == "damaged":
            return f"{self.name} is corrupt: {self.problem}"
        assert self.record is not None
        record = self.record
        return (
            f"{self.name} holds generation {record.generation} (term {record.current_term}, "
            f"accepted state term {record.accepted[0]} version {record.accepted[1]})"
        )


@dataclass(frozen=True)
class HistorySummary:
    """What the node's history proves: the newest `term` and `accepted` events and whose events they are."""

    name: str = "the history"
    events: int = 0  # complete events read
    term: int = 0
    accepted: tuple[int, int] = (0, 0)
    node_ids: frozenset[str] = frozenset()
    damaged: str = ""  # describes unreadable lines (other than a line cut by a crash), "" when none

    def describe(self) -> str:
        return (
            f"{self.name} holds {self.events} events (newest term {self.term}, "
            f"newest accepted state term {self.accepted[0]} version {self.accepted[1]})"
        )


@dataclass(frozen=True)
class StorageView:
    cluster_name: str
    node_id: str | None  # None when the node id file is missing
    node_id_name: str  # how messages name the node id file
    slots: tuple[SlotReading, ...]
    history: HistorySummary
    legacy: SlotReading | None = None  # a single-file record of an earlier format, if present (generation 0)
    others: tuple[str, ...] = ()  # descriptions of other files that show earlier use ("[hooks.json] holds hooks")


@dataclass(frozen=True)
class StartFresh:
    """No sign of earlier use: write the initial record (under a new node id if there is none)."""


@dataclass(frozen=True)
class LoadRecord:
    reading: SlotReading  # the slot (or legacy file) whose record to load
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Refuse:
    reason: str


Decision = StartFresh | LoadRecord | Refuse

_VOTE_TWICE = "could make this node vote twice in a term or lose an acknowledged write"


def decide_startup(view: StorageView) -> Decision:
    valid = [slot for slot in view.slots if slot.kind == "valid"]
    all_blank = all(slot.kind in ("missing", "empty") for slot in view.slots)
    candidates = valid
    if not valid and all_blank and view.legacy is not None and view.legacy.kind == "valid":
        candidates = [view.legacy]  # the first start after an upgrade
    if not candidates:
        return _no_valid_record(view)
    if view.node_id is None:
        return _missing_node_id(view, candidates)
    for reading in candidates:
        record = reading.record
        assert record is not None
        if record.node_id is not None and record.node_id != view.node_id:
            return Refuse(
                f"{reading.name} holds the state of node [{record.node_id}], but {view.node_id_name} says this is "
                f"node [{view.node_id}]: the file was copied from another node; refusing to start, because it "
                f"{_VOTE_TWICE}. Put back this node's own file, or wipe the data directory so that the node "
                "joins as a new node"
            )
        if record.cluster_name != view.cluster_name:
            return Refuse(
                f"{reading.name} holds a state of cluster [{record.cluster_name}], "
                f"but cluster.name is [{view.cluster_name}]"
            )
    strangers = sorted(view.history.node_ids - {view.node_id})
    if strangers:
        return Refuse(
            f"{view.history.name} holds events of node {strangers}, but {view.node_id_name} says this is node "
            f"[{view.node_id}]: files of another node were copied in; refusing to start"
        )
    newest = max(candidates, key=_generation)
    if len(valid) == 2:
        first, second = (slot.record for slot in valid)
        assert first is not None and second is not None
        if first.generation == second.generation and first.fingerprint != second.fingerprint:
            return Refuse(
                f"{valid[0].name} and {valid[1].name} are corrupt: "
                f"different records with the same generation {first.generation}"
            )
        if abs(first.generation - second.generation) > 1:
            return Refuse(
                f"{valid[0].describe()} and {valid[1].describe()}: writes alternate between the two, so their "
                "generations differ by one; one of them was replaced by an older copy or another node's, and "
                f"the newest record may be lost; refusing to start, because that {_VOTE_TWICE}"
            )
    record = newest.record
    assert record is not None
    others = [slot for slot in view.slots if slot is not newest]
    gaps = [slot for slot in others if slot.kind != "valid"]
    history = view.history
    if history.term > record.current_term or history.accepted > record.accepted:
        lost = "; ".join(slot.describe() for slot in others) or "there is no other copy"
        return Refuse(
            f"{newest.describe()} is older than {history.describe()}: an acknowledged write was lost on disk "
            f"({lost}); refusing to start, because loading it {_VOTE_TWICE}. Put back the lost file if you have "
            "it (it is checked again), or wipe the data directory so that the node joins as a new node"
        )
    warnings = [f"ignoring {slot.describe()}; using {newest.name}" for slot in gaps if slot.kind == "damaged"]
    # A slot that was written (the newest record is past the first) but is now blank was emptied or deleted
    # from outside (the node never does either), and it may have held the newest record: only the history can
    # show that nothing acknowledged was lost with it. A damaged slot beside a valid one is what a crash in
    # the middle of a write leaves, even before the first history event (a bootstrap writes none), so it
    # needs no history; the check above still applies when there is one.
    blanks = [slot for slot in gaps if slot.kind in ("missing", "empty")]
    needs_history = newest is not view.legacy and record.generation > 1 and bool(blanks)
    if needs_history and (history.events == 0 or history.damaged):
        why = f"{history.name} is damaged ({history.damaged})" if history.damaged else f"{history.name} is empty"
        return Refuse(
            f"{'; '.join(slot.describe() for slot in blanks)}, and {why}, so nothing shows that "
            f"{newest.describe()} is the newest record this node acknowledged; refusing to start, because "
            f"loading an older record {_VOTE_TWICE}. Put back the lost file if you have it (it is checked again), "
            "or wipe the data directory so that the node joins as a new node"
        )
    if history.damaged:
        warnings.append(f"{history.name} is damaged ({history.damaged}); both state slots agree, so using them")
    return LoadRecord(newest, tuple(warnings))


def _generation(reading: SlotReading) -> int:
    assert reading.record is not None
    return reading.record.generation


def _evidence(view: StorageView) -> list[str]:
    """Everything that shows the storage was used before, in words for the refusal message."""
    found = [slot.describe() for slot in view.slots if slot.kind != "missing"]
    if view.legacy is not None:
        found.append(view.legacy.describe())
    if view.node_id is not None:
        found.append(f"{view.node_id_name} holds node id [{view.node_id}]")
    if view.history.events or view.history.damaged:
        found.append(view.history.describe() + (f", damaged: {view.history.damaged}" if view.history.damaged else ""))
    found.extend(view.others)
    return found


def _no_valid_record(view: StorageView) -> Decision:
    evidence = _evidence(view)
    if not evidence:
        return StartFresh()
    blank = [slot for slot in view.slots if slot.kind != "valid"]
    detail = "; ".join(evidence + [slot.describe() for slot in blank if slot.kind == "missing"])
    if view.legacy is not None and not all(slot.kind in ("missing", "empty") for slot in view.slots):
        detail += f"; {view.legacy.name} is older than the slots"
    return Refuse(
        f"no valid coordination state, but the data directory was used before: {detail}; refusing to reset it, "
        f"because starting as a new node {_VOTE_TWICE}. Put back the lost files if you have them (they are checked "
        "again), or wipe the data directory so that the node joins as a new node"
    )


def _missing_node_id(view: StorageView, candidates: list[SlotReading]) -> Decision:
    """The node id file is missing but a record exists. If every record is the initial one, no vote and no ack
    was ever made (a crash cut the first start short, before the node id was written): start fresh."""
    untouched = (
        all(slot.record is not None and slot.record.initial for slot in candidates)
        and not any(slot.kind == "damaged" for slot in view.slots)
        and view.legacy is None
        and not view.history.events
        and not view.others
    )
    if untouched:
        return StartFresh()
    return Refuse(
        f"{view.node_id_name} is missing but {'; '.join(_evidence(view))}; refusing to invent a new identity for "
        "a node that has voted or acknowledged states. Put back the node id file, or wipe the data directory so "
        "that the node joins as a new node"
    )


def recovered_state_event(
    node_id: str, node_name: str, state: ClusterState, history: HistorySummary
) -> HistoryEvent | None:
    """The `accepted` event to append at startup when the loaded state is newer than any in the history.

    A write that failed (an fsync error, say) may still have reached the disk, so a restarted node can hold a
    state it never acknowledged and never recorded. Recording it before the node acts on it keeps the history
    complete: a master that later builds on that state names a parent that some history holds.
    """
    if (state.term, state.version) <= history.accepted:
        return None
    return state_event(EventType.ACCEPTED, node_id, node_name, state, reason="loaded at startup")
