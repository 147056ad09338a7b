"""Reading the node's own history: what it proves at startup (`summarize_history`), where its seq continues
(`last_seq_in`), and its events for `GET /_history` (`read_events_after`), from plain and compressed segments
of format 1 and 2 alike. A compressed segment that is cut short or damaged (`DamagedSegment`), or a segment of a
format this release does not read (`SegmentFormatError`), is named as such, never read as fewer events. One whose
first line declares a format newer than this release reads and the release that wrote it stops the node at
startup (`HistoryNewer`), naming that release.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, NamedTuple

import msgspec

from coordinated.coordination.counters import LONG_MAX
from coordinated.coordination.history import MARK_CARRYING_EVENT_TYPES, RESET_EVENT_TYPES, EventType
from coordinated.coordination.history_format import SegmentFormatError, format_problem, newer_segment_problem
from coordinated.coordination.history_frames import DamagedSegment, declared_size
from coordinated.coordination.history_lines import is_complete
from coordinated.coordination.recovery import HistorySummary
from coordinated.release import installed_release
from coordinated.sidecar.events.history_segments import expanded_lines, list_segments, plain_tail, read_lines


class HistoryNewer(Exception):
    """A segment of a history format newer than this release reads; the message names it, the format and the
    release that wrote it. Nothing was changed."""


_MARK_CARRIERS = frozenset(kind.value for kind in MARK_CARRYING_EVENT_TYPES)
_RESETS = frozenset(kind.value for kind in RESET_EVENT_TYPES)
_FORMAT1_LINE = msgspec.json.Encoder(order="sorted")
_RETRIES = 3  # a segment compressed or deleted under a reader: list the segments again, this often
# The fewest bytes of history line per seq: a folded format-2 line holds two seqs in more than 40 bytes. With a
# compressed segment's content size it bounds the seqs the segment can hold (`seq_bound`).
MIN_BYTES_PER_SEQ = 16
# A compressed segment whose frame header is damaged declares no content size: it is taken to hold at most
# this many times its compressed size (the node's segments compress about 9 to 1), or `history.segment_size`.
MAX_COMPRESSION_RATIO = 256


# A term or version a line records: an integer of the wire's range, or the line is damage (not a mark).
_Mark = Annotated[int, msgspec.Meta(ge=0, le=LONG_MAX)]


class UnreadableHistory(Exception):
    """A segment `read_events_after` cannot read whole (damaged, or of another format): the message names it."""


class _Head(msgspec.Struct):
    """What every line of either format carries, and the marks: decoding only this checks a line's shape."""

    node: str
    seq: int
    type: str
    term: _Mark
    version: _Mark | None = None
    committed: bool = False  # a folded line of format 2 stands for two events
    marks_term: _Mark | None = None
    marks_accepted: tuple[_Mark, _Mark] | None = None


_HEAD = msgspec.json.Decoder(_Head)


def _head(line: bytes) -> _Head | None:
    try:
        return _HEAD.decode(line)
    except (ValueError, RecursionError):  # msgspec.DecodeError, invalid UTF-8, or arrays nested too deep
        return None


class SegmentEnd(NamedTuple):
    """Where a segment's events end, as far as it can be read."""

    last: int | None  # the last complete event's seq (of the part that could be read)
    partial: bool  # the segment ends in a line cut by a crash
    damage: str = ""  # a compressed segment that cannot be read whole: what is wrong with it


def last_seq_in(path: Path) -> SegmentEnd:
    """The last complete event's seq, whether the segment ends in a line cut by a crash, and whether (and how)
    a compressed one is damaged: then `last` is that of the part before the damage."""
    if path.name.endswith(".zst"):
        last: int | None = None
        partial = False
        try:
            for line in read_lines(path):
                partial = not is_complete(line)
                head = None if partial else _head(line)
                if head is not None:
                    last = head.seq
        except DamagedSegment as error:
            return SegmentEnd(last, False, str(error))
        return SegmentEnd(last, partial)
    tail, partial = plain_tail(path)
    for line in reversed(tail.split(b"\n")):
        head = _head(line) if line.strip() else None
        if head is not None:
            return SegmentEnd(head.seq, partial)  # a folded line's seq is its last event's
    return SegmentEnd(None, partial)


def seq_bound(path: Path, first_seq: int, segment_size: int) -> int:
    """A seq past every seq a (damaged) compressed segment can hold: its content size, from its frame header
    (or, if the header is damaged too, `MAX_COMPRESSION_RATIO` times its size, and at least `segment_size`), at
    `MIN_BYTES_PER_SEQ` bytes a seq."""
    try:
        with path.open("rb") as file:
            head = file.read(64)
            size = declared_size(head)
            if size is None:
                size = max(segment_size, MAX_COMPRESSION_RATIO * path.stat().st_size)
    except OSError:
        size = max(segment_size, 1 << 30)
    return min(LONG_MAX, first_seq + size // MIN_BYTES_PER_SEQ + 1)


def _events_after(directory: Path, after_seq: int) -> Iterator[tuple[bytes, int]]:
    segments = list_segments(directory)
    for index, (_first_seq, path) in enumerate(segments):
        next_first = segments[index + 1].first_seq if index + 1 < len(segments) else None
        if next_first is not None and next_first <= after_seq + 1:
            continue
        try:
            for expanded in expanded_lines(path):
                for event in expanded.events or ():
                    seq = event.get("seq")
                    if isinstance(seq, int) and seq > after_seq:
                        yield _FORMAT1_LINE.encode(event) + b"\n", seq
        except DamagedSegment as error:
            raise UnreadableHistory(f"[{path}] is {error}") from None
        except SegmentFormatError as error:
            raise UnreadableHistory(f"[{path}] {error}") from None


def read_events_after(directory: Path, after_seq: int, limit: int | None = None) -> Iterator[bytes]:
    """Format-1 event lines with seq > after_seq, oldest first, skipping segments that end before it. Raises
    UnreadableHistory, naming the segment, at one that cannot be read whole."""
    count = 0
    position = after_seq
    for _attempt in range(_RETRIES):
        try:
            for line, seq in _events_after(directory, position):
                yield line
                position = seq
                count += 1
                if limit is not None and count >= limit:
                    return
            return
        except FileNotFoundError:
            continue  # compressed or deleted while being read: its events are in the new listing, or gone


def read_history_summary(directory: Path) -> HistorySummary | str:
    """`summarize_history`, or why the node cannot use its history (a segment of a newer format): what the
    store's startup check reads of the history."""
    try:
        return summarize_history(directory)
    except HistoryNewer as newer:
        return str(newer)


def summarize_history(directory: Path) -> HistorySummary:
    """What a history proves about the node's durable writes: the highest `term` and accepted (term, version).

    Both events are written after the term or state they record is durable and before any message relies on
    it, so a persisted record older than these marks has lost something this node acknowledged. Both only
    grow within one node's history, except that an `unsafe_bootstrap` or `detached` event (the offline tool
    rewrote the state) replaces all older marks with its `marks_term` and `marks_accepted`. A `retention_cut`
    or `history_lost` event restates the marks the history held when it was written (the segments a cut
    deleted, or a deleted segment, may have held the newest ones), so they count like a `term` and an
    `accepted` event. Segments are read newest first until each kind of mark has been seen or a reset event
    was; plain segments are all read. A line that cannot be read, other than a last line cut by a crash, is
    reported as damage (marks it held are lost). The node ids are those of every line read. A segment of a
    newer format than this release reads raises HistoryNewer (the node refuses to start, changing nothing).
    """
    term: int | None = None
    accepted: tuple[int, int] | None = None
    events = 0
    node_ids: set[str] = set()
    damaged: list[str] = []
    done = False
    for _first_seq, path in reversed(list_segments(directory)):
        if done and path.name.endswith(".zst"):
            continue  # compressed segments are checked whole in the background (`history_maintenance`)
        segment_term: int | None = None
        segment_accepted: tuple[int, int] | None = None
        reset = False
        try:
            lines = list(read_lines(path))
        except DamagedSegment as error:
            damaged.append(f"[{path}], which is {error}")
            continue
        except OSError as error:
            damaged.append(f"[{path}], which cannot be read ({error.strerror or error})")
            continue
        newer = newer_segment_problem(lines[0], f"[{path}]", installed_release()) if lines else None
        if newer is not None:  # a newer release's: the node refuses to start rather than read it as damage
            raise HistoryNewer(newer)
        problem = format_problem(lines[0]) if lines else ""
        if problem:
            damaged.append(f"[{path}], which {problem}")
            continue
        for number, line in enumerate(lines, 1):
            if not is_complete(line) or not line.strip():
                continue  # a partial line left by a crash, or a blank one
            head = _head(line)
            if head is None:
                damaged.append(f"[{path}] line {number}")
                continue
            events += 2 if head.committed else 1
            node_ids.add(head.node)
            kind = head.type
            if kind == EventType.TERM:
                segment_term = max(segment_term or 0, head.term)
            elif kind == EventType.ACCEPTED:
                segment_accepted = max(segment_accepted or (0, 0), (head.term, head.version or 0))
            elif (kind in _RESETS or kind in _MARK_CARRIERS) and head.marks_accepted is not None:
                marks = (head.marks_term or 0, tuple(head.marks_accepted))
                if kind in _RESETS:
                    segment_term, segment_accepted = marks[0], (marks[1][0], marks[1][1])
                    reset = True
                else:
                    segment_term = max(segment_term or 0, marks[0])
                    segment_accepted = max(segment_accepted or (0, 0), (marks[1][0], marks[1][1]))
        if done:
            continue
        # Newer segments' marks are already in `term` and `accepted`; they come after this segment's.
        if segment_term is not None:
            term = segment_term if term is None else term if reset else max(term, segment_term)
        if segment_accepted is not None:
            accepted = segment_accepted if accepted is None else accepted if reset else max(accepted, segment_accepted)
        if reset or (term is not None and accepted is not None):
            done = True
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
