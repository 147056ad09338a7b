"""The node's history (the event schema is in docs/protocol.md): JSON Lines in rotating segment files under DATA_DIR/history/.

Events are written with a plain `write` on an O_APPEND descriptor before the effect they record is carried
out, so a killed process never loses an event it acted on (the page cache survives a process crash; set
`history.fsync` to survive a machine crash as well). `seq` continues from the last event on disk.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from coordinated.coordination.counters import LONG_MAX
from coordinated.coordination.history_lines import ends_with_cut_line, is_complete
from coordinated.coordination.offline_recovery import RESET_EVENTS
from coordinated.coordination.recovery import HistorySummary
from coordinated.coordination.settings import bool_setting, size_setting

HISTORY_SEGMENT_SIZE = size_setting(
    "history.segment_size", "16mb", minimum="1kb", maximum="1gb", doc="history segment rotation size"
)
HISTORY_FSYNC = bool_setting("history.fsync", False, doc="`true` fsyncs each history line")

_SEGMENT = re.compile(r"^segment-(\d{12})\.jsonl$")
_TAIL_BYTES = 64 * 1024
# One line per event, keys sorted, no spaces (the form `_MARK_MARKERS` searches for); a few lines per write on
# every node, so msgspec rather than `json` (about 2 µs a line instead of 15).
_LINE_ENCODER = msgspec.json.Encoder(order="sorted", enc_hook=str)
# The events whose marks bound what a restarted node may load (see `summarize_history`).
_MARK_MARKERS = tuple(b'"type":"%s"' % kind.encode() for kind in ("term", "accepted", *RESET_EVENTS))


# What reading one history line can raise: a line that is not JSON, lacks a field or holds the wrong type, a
# number too large for an int (`1e999`), or arrays nested past the decoder's stack.
_UNREADABLE = (ValueError, KeyError, TypeError, OverflowError, RecursionError)


def _mark(value: object) -> int:
    """A term or version that a history line records: an integer of the wire's range, or the line is damage."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= LONG_MAX:
        raise ValueError(f"not a term or version: {value!r}")
    return value


def segment_name(first_seq: int) -> str:
    return f"segment-{first_seq:012d}.jsonl"


def list_segments(directory: Path) -> list[tuple[int, Path]]:
    segments = []
    for entry in directory.iterdir() if directory.exists() else ():
        match = _SEGMENT.match(entry.name)
        if match:
            segments.append((int(match.group(1)), entry))
    return sorted(segments)


def last_seq_in(path: Path) -> tuple[int | None, bool]:
    """(the last complete event's seq, whether the file ends in a partial line)."""
    size = path.stat().st_size
    with path.open("rb") as file:
        file.seek(max(0, size - _TAIL_BYTES))
        tail = file.read()
    partial = ends_with_cut_line(tail)
    lines = tail.split(b"\n")
    if partial:
        lines = lines[:-1]
    for line in reversed(lines):
        if not line.strip():
            continue
        try:
            return int(json.loads(line)["seq"]), partial
        except _UNREADABLE:
            continue  # the first line of the tail window may be cut; keep looking back
    return None, partial


class HistoryWriter:
    def __init__(
        self,
        directory: Path,
        segment_size: int,
        fsync: bool = False,
        on_segment_closed: Callable[[Path], None] | None = None,
    ) -> None:
        """`on_segment_closed(path)` is called, on the writer's thread, for each segment it stops writing to."""
        self.directory = directory
        self.segment_size = segment_size
        self.fsync = fsync
        self.on_segment_closed = on_segment_closed
        directory.mkdir(parents=True, exist_ok=True)
        self.last_seq = 0
        self.truncated_segments: list[str] = []
        segments = list_segments(directory)
        need_new_segment = not segments
        for first_seq, path in reversed(segments):
            last, partial = last_seq_in(path)
            if partial and path == segments[-1][1]:
                # A crash cut the last line. Leave it as the last line of its segment, where the audit
                # tolerates it, and continue in a new segment.
                self.truncated_segments.append(path.name)
                need_new_segment = True
            if last is not None:
                self.last_seq = last
                break
            self.last_seq = max(self.last_seq, first_seq - 1)
        self._fd = -1
        self._size = 0
        self.path: Path = directory / segment_name(self.last_seq + 1)  # the segment being written
        if need_new_segment:
            self._open(self.last_seq + 1)
        else:
            self.path = segments[-1][1]
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            self._size = self.path.stat().st_size

    def _open(self, first_seq: int) -> None:
        closed = self.path if self._fd >= 0 else None
        if self._fd >= 0:
            os.close(self._fd)
        self.path = self.directory / segment_name(first_seq)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = self.path.stat().st_size
        if closed is not None and self.on_segment_closed is not None:
            self.on_segment_closed(closed)

    def rotate(self) -> None:
        """Close the current segment now (if it holds anything) and continue in a new one."""
        if self._size > 0:
            self._open(self.last_seq + 1)

    def closed_segments(self) -> list[Path]:
        """Every segment but the one being written, oldest first."""
        return [path for _, path in list_segments(self.directory) if path != self.path]

    def append(self, event: dict[str, Any]) -> dict[str, Any]:
        """Assign seq and ts, write the line, and return the full event."""
        seq = self.last_seq + 1
        full = {**event, "seq": seq, "ts": round(time.time(), 6)}
        line = _LINE_ENCODER.encode(full) + b"\n"
        if self._size > 0 and self._size + len(line) > self.segment_size:
            self._open(seq)
        view = memoryview(line)
        while view:
            view = view[os.write(self._fd, view) :]
        if self.fsync:
            os.fsync(self._fd)
        self._size += len(line)
        self.last_seq = seq
        return full

    def total_bytes(self) -> int:
        return sum(path.stat().st_size for _, path in list_segments(self.directory))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def read_events_after(directory: Path, after_seq: int, limit: int | None = None) -> Iterator[bytes]:
    """Complete event lines with seq > after_seq, oldest first, skipping segments that end before it."""
    segments = list_segments(directory)
    count = 0
    for index, (_first_seq, path) in enumerate(segments):
        next_first = segments[index + 1][0] if index + 1 < len(segments) else None
        if next_first is not None and next_first <= after_seq + 1:
            continue
        with path.open("rb") as file:
            for line in file:
                if not is_complete(line):
                    continue  # a crash-cut line
                try:
                    seq = int(json.loads(line)["seq"])
                except _UNREADABLE:
                    continue
                if seq > after_seq:
                    yield line
                    count += 1
                    if limit is not None and count >= limit:
                        return


def summarize_history(directory: Path) -> HistorySummary:
    """What a history proves about the node's durable writes: the highest `term` and accepted (term, version).

    Both events are written after the term or state they record is durable and before any message relies on
    it, so a persisted record older than these marks has lost something this node acknowledged. Both only
    grow within one node's history, except that an `unsafe_bootstrap` or `detached` event (the offline tool
    rewrote the state) replaces all older marks with its `marks_term` and `marks_accepted`; so segments are read
    newest first until each kind has been seen or a reset event was. A line
    that cannot be read, other than a last line cut by a crash, is reported as damage: marks it held are lost.
    The node ids are those of the marks and reset events.
    """
    term: int | None = None
    accepted: tuple[int, int] | None = None
    events = 0
    node_ids: set[str] = set()
    damaged: list[str] = []
    for _first_seq, path in reversed(list_segments(directory)):
        # Marks of this segment; a reset event (written by `coordinated node-tool`) replaces those before it.
        segment_term: int | None = None
        segment_accepted: tuple[int, int] | None = None
        reset = False
        with path.open("rb") as file:
            for number, line in enumerate(file, 1):
                if not line.endswith(b"\n"):
                    continue  # a partial line left by a crash
                if not line.strip():
                    continue
                if not any(marker in line for marker in _MARK_MARKERS):
                    # Only the marks are decoded, so that a long history is read quickly at startup.
                    if line.startswith(b"{") and line.endswith(b"}\n"):
                        events += 1
                    else:
                        damaged.append(f"[{path}] line {number}")
                    continue
                try:
                    event = json.loads(line)
                    if event["type"] == "term":
                        segment_term = max(segment_term or 0, _mark(event["term"]))
                    elif event["type"] == "accepted":
                        mark = (_mark(event["term"]), _mark(event.get("version") or 0))
                        segment_accepted = max(segment_accepted or (0, 0), mark)
                    elif event["type"] in RESET_EVENTS:
                        marks_term, marks_version = (_mark(part) for part in event["marks_accepted"])
                        segment_term, segment_accepted = _mark(event["marks_term"]), (marks_term, marks_version)
                        reset = True
                except _UNREADABLE:
                    damaged.append(f"[{path}] line {number}")
                    continue
                events += 1
                if isinstance(event.get("node"), str):
                    node_ids.add(event["node"])
        # Newer segments' marks are already in `term` and `accepted`; they come after this segment's.
        if segment_term is not None and term is None:
            term = segment_term
        elif segment_term is not None and term is not None and not reset:
            term = max(term, segment_term)
        if segment_accepted is not None and accepted is None:
            accepted = segment_accepted
        elif segment_accepted is not None and accepted is not None and not reset:
            accepted = max(accepted, segment_accepted)
        if reset or (term is not None and accepted is not None):
            break
    detail = ", ".join(damaged[:3]) + (f" and {len(damaged) - 3} more" if len(damaged) > 3 else "")
    return HistorySummary(
        name=f"[{directory}]",
        events=events,
        term=term or 0,
        accepted=accepted or (0, 0),
        node_ids=frozenset(node_ids),
        damaged=f"unreadable {detail}" if damaged else "",
    )


def newest_durable_marks(directory: Path) -> tuple[int, tuple[int, int]]:
    """The highest `term` and accepted (term, version) in a history (0 and (0, 0) where there are none)."""
    summary = summarize_history(directory)
    return summary.term, summary.accepted
