"""The node's history writer: format-2 JSON lines (`coordinated.coordination.history_format`) in segment files
under DATA_DIR/history/ (`history_segments`).

Events are written with a plain `write` on an O_APPEND descriptor before the effect they record is carried
out, so a killed process never loses an event it acted on (the page cache survives a process crash; set
`history.fsync` to survive a machine crash as well). `seq` continues from the last event on disk; every start
writes into a new segment, created with its first event, and a segment is closed once it would grow past
`segment_size` (`on_rotate` then gets its path: the node compresses it, see `history_maintenance`).

A seq is never given twice. If the newest segment is a compressed one that is cut short or damaged, where its
events end is unknown (an intact copy may be in the archive): `seq` continues past every seq it can hold
(`history_read.seq_bound`), and the first event written is a `history_lost` event that names the damaged
segment (`damaged_segment`) and the seqs skipped, from the last one that could be read. The damaged file stays
where it is, for the operator (health names it, see `history_maintenance`).

The writer notices files lost under it. Before an append (at most once per `check_interval_s`) it looks at
its open segment: if the file was deleted (no link left) or replaced (its name now names another file), it
writes no further line into it. It opens a new segment and records the loss there first, as a
`history_lost` event naming the seqs that segment held, with the node's marks (the newest `term` and
accepted state the history held), so the history still proves what was persisted. A write that fails (a full
disk, an I/O error) is cut back off the file; its seq stays used, and the next line that can be written is a
`history_lost` event naming the seqs that could not be. Nothing here raises into the node: the loss is
recorded, logged, and shown in health and metrics (`losses`, `write_failure`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinated.coordination.effects import RecordHistory
from coordinated.coordination.history import (
    MARK_CARRYING_EVENT_TYPES,
    RESET_EVENT_TYPES,
    EventType,
    HistoryEvent,
)
from coordinated.coordination.history_format import LineEncoder, coerce_event
from coordinated.sidecar.events.history_read import (
    last_seq_in,
    newest_durable_marks,
    read_events_after,
    seq_bound,
    summarize_history,
)
from coordinated.sidecar.events.history_segments import Segment, list_segments, read_lines, segment_name

log = logging.getLogger("coordinated.history")

Marks = tuple[int, tuple[int, int]]  # (newest term, newest accepted (term, version))
NO_MARKS: Marks = (0, (0, 0))
CHECK_INTERVAL_S = 1.0


@dataclass(frozen=True)
class HistoryLoss:
    """Events this node's history lost while it ran, as recorded in its `history_lost` event."""

    first_seq: int
    last_seq: int
    reason: str

    @property
    def events(self) -> int:
        return self.last_seq - self.first_seq + 1


def marks_after(marks: Marks, event: HistoryEvent) -> Marks:
    """The history's marks once `event` is written (see `summarize_history`)."""
    term, accepted = marks
    kind = event.type
    if kind is EventType.TERM:
        return max(term, event.term), accepted
    if kind is EventType.ACCEPTED:
        return term, max(accepted, (event.term, event.version or 0))
    carried_term = event.marks_term if isinstance(event.marks_term, int) else term
    carried = tuple(event.marks_accepted) if isinstance(event.marks_accepted, (tuple, list)) else accepted
    if kind in RESET_EVENT_TYPES:  # the node tool's reset replaces every older mark
        return carried_term, (int(carried[0]), int(carried[1]))
    if kind in MARK_CARRYING_EVENT_TYPES:
        return max(term, carried_term), max(accepted, (int(carried[0]), int(carried[1])))
    return marks


def folds_with_next(effects: Sequence[object], index: int) -> bool:
    """Whether effect `index` records a follower's `committed` (no quorum) of the state whose `applied` the next
    effect records: the two are written as one format-2 line, still before anything that follows them."""
    if index + 1 >= len(effects):
        return False
    first, second = effects[index], effects[index + 1]
    if not isinstance(first, RecordHistory) or not isinstance(second, RecordHistory):
        return False
    committed, applied = first.event, second.event
    return (
        committed.type is EventType.COMMITTED
        and committed.quorum is None
        and applied.type is EventType.APPLIED
        and applied.state_uuid == committed.state_uuid
        and applied.node == committed.node
    )


def _holds_complete_line(path: Path) -> bool:
    try:
        return any(line.endswith(b"\n") for line in read_lines(path))
    except OSError:
        return True  # damaged: not this writer's to remove (a start skips past it, see the module's docstring)


class HistoryWriter:
    def __init__(
        self,
        directory: Path,
        segment_size: int,
        fsync: bool = False,
        *,
        marks: Marks = NO_MARKS,
        on_rotate: Callable[[Path], None] | None = None,
        check_interval_s: float = CHECK_INTERVAL_S,
    ) -> None:
        self.directory = directory
        self.segment_size = segment_size
        self.fsync = fsync
        self.marks = marks
        self.on_rotate = on_rotate
        self.check_interval_s = check_interval_s
        directory.mkdir(parents=True, exist_ok=True)
        self.last_seq = 0
        self.truncated_segments: list[str] = []
        # (segment name, what is wrong, first seq skipped) of a damaged newest segment, recorded with the next event
        self._skipped: tuple[str, str, int] | None = None
        segments = list_segments(directory)
        for first_seq, path in reversed(segments):
            last, partial, damage = last_seq_in(path)
            if damage:
                readable = max(first_seq - 1, last or 0)
                self.last_seq = max(self.last_seq, seq_bound(path, first_seq, segment_size))
                self._skipped = (path.name, damage, readable + 1)
                log.error(
                    "history: %s is %s; seq continues after %d, past every seq it can hold, and the events it held "
                    "after seq %d are recorded as lost",
                    path,
                    damage,
                    self.last_seq,
                    readable,
                )
                break
            if partial and path == segments[-1].path:
                # A crash cut the last line. It stays the last line of its segment, where readers skip it.
                self.truncated_segments.append(path.name)
            if last is not None:
                self.last_seq = last
                break
            self.last_seq = max(self.last_seq, first_seq - 1)
        self.losses: list[HistoryLoss] = []
        self.write_failure = ""  # why the last write failed, "" once a write succeeds again
        self._unwritten: tuple[int, int] | None = None  # seqs whose writes failed, not recorded yet
        self._encoder = LineEncoder()
        self._fd = -1
        self._path: Path | None = None
        self._first_seq = 0
        self._size = 0
        self._checked_at = 0.0

    @property
    def open_segment(self) -> Segment | None:
        """The segment being written, None before this process's first event."""
        return Segment(self._first_seq, self._path) if self._path is not None and self._fd >= 0 else None

    def append(self, event: HistoryEvent, *, folds_commit: bool = False) -> int:
        """Write `event` (with `folds_commit`: an `applied` that also stands for the node's `committed` of the
        same state, one seq before) and return its seq."""
        ts = time.time_ns() // 1000 / 1e6
        if self._fd >= 0 and ts - self._checked_at >= self.check_interval_s:
            self._checked_at = ts
            self.check_open_segment(event)
        if self._skipped is not None:
            self._record_skipped(event, ts)
        if self._unwritten is not None:
            self._record_unwritten(event, ts)
        return self._write_event(event, ts, folds_commit)

    def append_fields(self, fields: Mapping[str, Any]) -> int:
        """`append` for a tool's (or a test's) event given as a mapping that may leave fields out."""
        return self.append(coerce_event(fields))

    def check_open_segment(self, base: HistoryEvent) -> None:
        """Stop writing into an open segment that was deleted or replaced, and record what it held as lost."""
        if self._fd < 0 or self._path is None:
            return
        problem = ""
        opened = os.fstat(self._fd)
        try:
            named = os.stat(self._path)
        except FileNotFoundError:
            problem = "deleted"
        else:
            if (named.st_dev, named.st_ino) != (opened.st_dev, opened.st_ino):
                problem = "replaced by another file"
            elif opened.st_nlink == 0:
                problem = "deleted"
        if not problem:
            return
        name, first = self._path.name, self._first_seq
        self._close()
        if self.last_seq >= first:
            self.record_loss(base, first, self.last_seq, f"{name} was {problem} while the node was running")

    def record_loss(self, base: HistoryEvent, first_seq: int, last_seq: int, reason: str) -> None:
        """Record events `first_seq`..`last_seq` as lost, with the node's marks (see `history_lost`)."""
        loss = HistoryLoss(first_seq, last_seq, reason)
        self.losses.append(loss)
        log.error("history events %d to %d are lost: %s", first_seq, last_seq, reason)
        self.append(
            self.marks_event(
                base, EventType.HISTORY_LOST, first_lost_seq=first_seq, last_lost_seq=last_seq, reason=reason
            )
        )

    def marks_event(self, base: HistoryEvent, kind: EventType, **fields: object) -> HistoryEvent:
        """An event of the history itself (`retention_cut`, `history_lost`) about the node of `base`, carrying
        the history's marks: the node's term, no state."""
        term, accepted = self.marks
        return HistoryEvent(
            cluster_uuid=base.cluster_uuid,
            node=base.node,
            node_name=base.node_name,
            type=kind,
            term=max(term, base.term),
            last_committed_config=base.last_committed_config,
            last_accepted_config=base.last_accepted_config,
            marks_term=term,
            marks_accepted=accepted,
            **fields,  # type: ignore[arg-type]
        )

    def _record_skipped(self, base: HistoryEvent, ts: float) -> None:
        """Record the seqs skipped past a damaged newest segment (see the module's docstring), once."""
        assert self._skipped is not None
        name, damage, first = self._skipped
        self._skipped = None
        reason = f"{name} is {damage}; the seqs it may hold from {first} on are not used again"
        lost = self.marks_event(
            base,
            EventType.HISTORY_LOST,
            first_lost_seq=first,
            last_lost_seq=self.last_seq,
            damaged_segment=name,
            reason=reason,
        )
        self._write_event(lost, ts, False)

    def _record_unwritten(self, base: HistoryEvent, ts: float) -> None:
        """Record the seqs whose writes failed, once a line can be written again."""
        assert self._unwritten is not None
        first, last = self._unwritten
        reason = f"writing failed: {self.write_failure}"
        lost = self.marks_event(base, EventType.HISTORY_LOST, first_lost_seq=first, last_lost_seq=last, reason=reason)
        self._write_event(lost, ts, False)
        if self._unwritten == (first, last):  # written: a failure would have added its own seq to the range
            self.losses.append(HistoryLoss(first, last, reason))
            self._unwritten = None
            self.write_failure = ""

    def _write_event(self, event: HistoryEvent, ts: float, folds_commit: bool) -> int:
        seq = self.last_seq + (2 if folds_commit else 1)
        first = seq - 1 if folds_commit else seq
        self.marks = marks_after(self.marks, event)
        self.last_seq = seq
        try:
            line = self._encoder.encode(event, seq, ts, folds_commit=folds_commit)
            if self._fd < 0 or (self._size > 0 and self._size + len(line) > self.segment_size):
                self._rotate(first)
                line = self._encoder.encode(event, seq, ts, folds_commit=folds_commit)
            self._write(line)
        except OSError as error:
            self._write_failed(first, seq, error)
            return seq
        self._size += len(line)
        if self.write_failure and self._unwritten is None:
            self.write_failure = ""
        return seq

    def _write(self, line: bytes) -> None:
        written = os.write(self._fd, line)
        if written < len(line):  # a short write (a signal, a nearly full disk): write the rest
            view = memoryview(line)[written:]
            while view:
                view = view[os.write(self._fd, view) :]
        if self.fsync:
            os.fsync(self._fd)

    def _write_failed(self, first: int, last: int, error: OSError) -> None:
        """Cut a partly written line back off (else it stays as a cut line and the next event starts a new
        segment), and remember the seqs for the `history_lost` event."""
        self.write_failure = f"cannot write to {self._path}: {error.strerror or error}"
        log.error("history: %s", self.write_failure)
        try:
            os.ftruncate(self._fd, self._size)
        except OSError:
            self._close()
        start = self._unwritten[0] if self._unwritten is not None else first
        self._unwritten = (start, last)

    def _rotate(self, first_seq: int) -> None:
        closed = self._path if self._fd >= 0 else None
        self._close()
        path = self.directory / segment_name(first_seq)
        if path.exists() and b"\n" not in path.read_bytes():
            # A crash cut this segment's very first line: it holds no event, and the next event (the same
            # seq) must not be appended to the cut bytes.
            log.warning("history: removing %s, which holds only a line cut by a crash", path)
            path.unlink()
        twin = self.directory / segment_name(first_seq, compressed=True)
        if twin.exists() and not _holds_complete_line(twin):
            # The same, compressed by a pass that ran before this process's first event: beside it, the new
            # plain segment would read as a compression's leftover.
            log.warning("history: removing %s, which holds only a line cut by a crash", twin)
            twin.unlink()
        self._path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._first_seq = first_seq
        self._size = os.fstat(self._fd).st_size
        self._encoder.start_segment()
        if closed is not None and self.on_rotate is not None:
            self.on_rotate(closed)

    def _close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = -1

    def rotate(self) -> None:
        """Close the open segment now, if it holds anything (before a graceful stop, so that the archive can take
        it); the next event starts a new one."""
        if self._fd >= 0 and self._size > 0:
            closed = self._path
            self._close()
            if closed is not None and self.on_rotate is not None:
                self.on_rotate(closed)

    def sync(self) -> None:
        """Make every line written so far durable (before a retention cut relies on its event)."""
        if self._fd >= 0:
            os.fsync(self._fd)

    def total_bytes(self) -> int:
        total = 0
        for _, path in list_segments(self.directory):
            try:
                total += path.stat().st_size
            except FileNotFoundError:
                continue  # compressed or deleted since the listing
        return total

    def close(self) -> None:
        self._close()


__all__ = [
    "HistoryLoss",
    "HistoryWriter",
    "Marks",
    "folds_with_next",
    "list_segments",
    "marks_after",
    "newest_durable_marks",
    "read_events_after",
    "summarize_history",
]
