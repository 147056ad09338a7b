"""Where a streaming watch stands, so that it resumes on a new stream (another node's, after a dropped
connection or a failover) without a gap and without reporting a change twice.

A stream sends the changes of one state version together, in key order, and a progress line says that
every version up to its own is complete. A stream's answer says where it starts (its `X-Coordinated-After-Version`
header) before any line: a watch "from now" that breaks before its first line resumes from there. So the position is the last complete version (`finished`), plus
how many events of the version being sent (`current`) were already reported. A resume asks for the changes
after `current - 1` and skips as many events of `current` as were reported: the server sends them again in
the same order. After a reset (the watch fell behind a node's change log and re-read each prefix at its own
version), the events at or below the version a prefix was re-read at are already in what was re-read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from coordinated.client.errors import CoordinatedError
from coordinated.client.models import WatchEvent


class MalformedStream(CoordinatedError):
    """A line of a watch stream that is not one of the API's: the stream is taken as broken."""


def parse_line(line: str) -> dict[str, Any]:
    try:
        message = json.loads(line)
    except ValueError as error:
        raise MalformedStream(f"a watch stream sent a line that is not JSON: {line[:200]!r}") from error
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise MalformedStream(f"a watch stream sent a line without a type: {line[:200]!r}")
    if not isinstance(message.get("version"), int):
        raise MalformedStream(f"a watch stream sent a line without a version: {line[:200]!r}")
    if message["type"] in ("put", "delete") and not isinstance(message.get("key"), str):
        raise MalformedStream(f"a watch stream sent an event without a key: {line[:200]!r}")
    return message


def event_of(message: Mapping[str, Any]) -> WatchEvent:
    return WatchEvent(
        message["type"], message["key"], message.get("value"), message["version"], message.get("prev_value")
    )


class StreamPosition:
    def __init__(self, after_version: int | None) -> None:
        self.finished = after_version  # every change up to this version has been reported (None: from now)
        self.current: int | None = None  # the version of the last event reported, if not known complete
        self.reported = 0  # events of `current` reported
        self.to_skip = 0  # events of `current` that the stream being read sends again
        self.re_read: dict[str, int] = {}  # prefix -> the version it was re-read at, after a reset

    def resume_after(self) -> int | None:
        """The `after_version` of the next stream; call it once per stream opened."""
        if self.current is not None:
            self.to_skip = self.reported
            return self.current - 1
        self.to_skip = 0
        return self.finished

    def progress(self, version: int) -> bool:
        """Everything up to `version` has been sent; whether that moved `finished` on."""
        moved = self.finished is None or version > self.finished
        if moved:
            self.finished = version
        if self.current is not None and self.current <= version:
            self.current, self.reported, self.to_skip = None, 0, 0
        self.re_read = {prefix: at for prefix, at in self.re_read.items() if at > version}
        return moved

    def reset(self, re_read: Mapping[str, int]) -> None:
        """Each prefix was re-read at its version; the stream goes on from the oldest of them."""
        self.finished = min(re_read.values())
        self.current, self.reported, self.to_skip = None, 0, 0
        self.re_read = {prefix: at for prefix, at in re_read.items() if at > self.finished}

    def report(self, event: WatchEvent) -> bool:
        """Whether the event is new to the caller (and is then counted as reported)."""
        version = event.version
        if self.finished is not None and version <= self.finished:
            return False
        if any(event.key.startswith(prefix) and version <= at for prefix, at in self.re_read.items()):
            return False
        if self.current is not None and version < self.current:
            return False
        if version == self.current:
            if self.to_skip > 0:
                self.to_skip -= 1
                return False
        else:
            if self.current is not None:
                self.progress(self.current)  # a later version has begun: the previous one is complete
            self.current, self.reported, self.to_skip = version, 0, 0
        self.reported += 1
        return True
