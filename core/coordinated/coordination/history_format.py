"""History lines, format 2: the compact form the sidecar writes, and the reader that turns it back into events.

Format 1 (earlier releases) writes every event as one JSON object with every field. Format 2 keeps the fields
and types of format 1 and saves bytes and CPU two ways (docs/sidecar.md, "History format"):

- the first line of each segment carries `"format": 2` and every field; a later line of the same segment
  leaves out `cluster_uuid`, `node_name`, `master`, `last_committed_config` and `last_accepted_config` when
  the value is the same as on the line before it;
- a follower's `committed` and `applied` of one state, written together, are one line of type `applied` with
  `"committed": true`. Its `seq` is the `applied` event's; the `committed` event has the seq before it and the
  same `ts`.

`SegmentExpander` reads a segment of either format line by line and gives exactly the events of format 1,
so every reader (the node's own startup check and `GET /_history`, the audit) sees one schema. This module
imports only msgspec, so the audit's Python workers can use it without the rest of the core.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from coordinated.coordination.formats import newer_format_problem
from coordinated.coordination.history import NO_CLUSTER_UUID, EventType, HistoryEvent

FORMAT = 2
# A segment of format 3 or later says on its first line, beside `format`, the release that wrote it
# (`"release": "0.3.0"`), so that a release that does not read it can say which one does.
RELEASE_FIELD = "release"
# Left out of a format-2 line when equal to the line before it in the same segment.
ELIDED_FIELDS: tuple[str, ...] = (
    "cluster_uuid",
    "node_name",
    "master",
    "last_committed_config",
    "last_accepted_config",
)
FOLDED = "committed"  # the flag of a folded `applied` line


_ENCODER = msgspec.json.Encoder()
_ALL_UNCHANGED = dict.fromkeys(ELIDED_FIELDS, msgspec.UNSET)


class LineEncoder:
    """Writes events as format-2 lines for one segment at a time: `start_segment` before its first line."""

    def __init__(self) -> None:
        self._previous: tuple[Any, ...] | None = None

    def start_segment(self) -> None:
        self._previous = None

    def encode(self, event: HistoryEvent, seq: int, ts: float, *, folds_commit: bool = False) -> bytes:
        """The line (with its newline) for `event` at `seq`; with `folds_commit`, an `applied` event that also
        stands for the node's `committed` of the same state at `seq - 1`.

        The event is encoded as it is (msgspec leaves UNSET fields out), with the fields that did not change
        since the segment's previous line set to UNSET; `format`, `seq`, `ts` and the fold flag go first."""
        current = (
            event.cluster_uuid,
            event.node_name,
            event.master,
            event.last_committed_config,
            event.last_accepted_config,
        )
        previous = self._previous
        self._previous = current
        if previous is None:
            body = _ENCODER.encode(event)
            head = b'{"format":%d,"seq":%d,"ts":%r,' % (FORMAT, seq, ts)
        else:
            if previous == current:  # the common case: one write after another, nothing of these changed
                unchanged = _ALL_UNCHANGED
            else:
                unchanged = {
                    name: msgspec.UNSET for name, a, b in zip(ELIDED_FIELDS, previous, current, strict=True) if a == b
                }
            body = _ENCODER.encode(msgspec.structs.replace(event, **unchanged) if unchanged else event)
            head = b'{"seq":%d,"ts":%r,' % (seq, ts)
        if folds_commit:
            head += b'"%s":true,' % FOLDED.encode()
        return head + body[1:] + b"\n"


def coerce_event(fields: Mapping[str, Any]) -> HistoryEvent:
    """A HistoryEvent from a mapping that may leave out fields (a tool's or a test's): missing identity fields
    get neutral values, so any mapping with a `type` and a `term` can be recorded."""
    defaults: dict[str, Any] = {
        "cluster_uuid": NO_CLUSTER_UUID,
        "node": "",
        "last_committed_config": (),
        "last_accepted_config": (),
    }
    merged = {**defaults, **{k: v for k, v in fields.items() if v is not None or k not in defaults}}
    merged.setdefault("node_name", merged["node"])
    merged.pop("seq", None)
    merged.pop("ts", None)
    return msgspec.convert(merged, HistoryEvent)


_NULLABLE = ("version", "state_uuid", "parent_uuid", "master", "quorum")
_DECODER = msgspec.json.Decoder()


@dataclass
class ExpandedLine:
    """One line of a segment: its events (format 1), or None when the line is not a JSON object."""

    number: int  # 1-based line number in the segment
    raw: bytes  # as read, without the line ending
    events: list[dict[str, Any]] | None


FORMATS = (1, FORMAT)  # the history formats this release reads (format 1 writes no `format` field)


class SegmentFormatError(ValueError):
    """A segment whose first line declares a history format this release does not read (a newer release's)."""


def format_problem(first_line: bytes) -> str:
    """'' when a segment whose first line is `first_line` is of a format this release reads, else why not.

    The format is the `format` field of a segment's first line (format 1 has none). Only a line that is a
    JSON object is looked at: a damaged first line is the reader's to name as such."""
    try:
        decoded = _DECODER.decode(first_line.rstrip(b"\r\n"))
    except (ValueError, RecursionError):
        return ""
    if not isinstance(decoded, dict) or "format" not in decoded:
        return ""
    declared = decoded["format"]
    if isinstance(declared, int) and not isinstance(declared, bool) and declared in FORMATS:
        return ""
    readable = " and ".join(str(f) for f in FORMATS)
    writer = decoded.get(RELEASE_FIELD)
    if isinstance(writer, str) and writer:
        return (
            f"is of history format [{msgspec.json.encode(declared).decode()[:40]}], written by coordinated "
            f"{writer[:64]}, which this release does not read (it reads formats {readable}): run coordinated "
            f"{writer[:64]} or later on it"
        )
    return (
        f"is of history format [{msgspec.json.encode(declared).decode()[:40]}], which this release does not read "
        f"(it reads formats {readable}): a newer release wrote it, or it is damaged"
    )


class SegmentExpander:
    """Reads one segment's complete lines in order, of format 1 or 2, and gives format-1 events.

    A line that is not a JSON object gives no events (`events` is None): it is damaged, and the caller names
    it. A format-2 line that leaves out a field no earlier line of its segment set gives an event without that
    field, which the audit's schema then calls malformed, naming the line. A first line that declares another
    format raises SegmentFormatError: no line of such a segment is read as an event.
    """

    def __init__(self) -> None:
        self.format = 1
        self._context: dict[str, Any] = {}
        self._lines = 0

    def expand(self, raw: bytes) -> ExpandedLine:
        self._lines += 1
        stripped = raw.rstrip(b"\r\n")
        try:
            decoded = _DECODER.decode(stripped)
        except (ValueError, RecursionError):  # msgspec.DecodeError, invalid UTF-8, or arrays nested too deep
            return ExpandedLine(self._lines, stripped, None)
        if not isinstance(decoded, dict):
            return ExpandedLine(self._lines, stripped, None)
        if self._lines == 1 and "format" in decoded:
            problem = format_problem(stripped)
            if problem:
                raise SegmentFormatError(problem)
            self.format = decoded["format"]
        if self.format == 1:
            return ExpandedLine(self._lines, stripped, [decoded])
        decoded.pop("format", None)
        context = self._context
        for name in ELIDED_FIELDS:
            if name in decoded:
                context[name] = decoded[name]
            elif name in context:
                decoded[name] = context[name]
        for name in _NULLABLE:
            decoded.setdefault(name, None)
        if decoded.pop(FOLDED, False) is True and decoded.get("type") == EventType.APPLIED.value:
            committed = dict(decoded)
            committed["type"] = EventType.COMMITTED.value
            seq = decoded.get("seq")
            committed["seq"] = seq - 1 if isinstance(seq, int) else seq
            return ExpandedLine(self._lines, stripped, [committed, decoded])
        return ExpandedLine(self._lines, stripped, [decoded])


FORMAT2_START = b'{"format":2,'
# How every line that declares a history format starts (the writer puts `format` first): format 2, or another
# one, which the Python reader names (format 1 declares none and goes to Spark's text reader).
FORMAT_START = b'{"format":'


def newer_segment_problem(first_line: bytes, what: str, this_release: str) -> str | None:
    """Why a segment whose first line is `first_line` cannot be read by this release: it declares a format newer
    than FORMAT and the release that wrote it (every release after 0.2.0 that writes another format puts its own
    `release` on the first line; the message names both). None otherwise: a format this release does not read
    with no writer named (a number that is not one, or no `release`) is damage, which `format_problem` names and
    the node skips as any other damaged segment."""
    if not first_line.startswith(FORMAT_START):
        return None
    try:
        head = _DECODER.decode(first_line.rstrip(b"\r\n"))
    except (ValueError, RecursionError):
        return None
    declared = head.get("format") if isinstance(head, dict) else None
    if not isinstance(declared, int) or isinstance(declared, bool) or declared <= FORMAT:
        return None
    writer = head.get(RELEASE_FIELD)
    if not isinstance(writer, str) or not writer:
        return None
    return newer_format_problem(what, declared, FORMAT, this_release, writer)


def is_format2_start(first_line: bytes) -> bool:
    """Whether a segment whose first line is `first_line` is of format 2: the writer puts `format` first."""
    return first_line.startswith(FORMAT2_START)


__all__ = [
    "ELIDED_FIELDS",
    "FORMAT",
    "FORMATS",
    "ExpandedLine",
    "LineEncoder",
    "SegmentExpander",
    "SegmentFormatError",
    "coerce_event",
    "format_problem",
    "is_format2_start",
    "newer_segment_problem",
]
