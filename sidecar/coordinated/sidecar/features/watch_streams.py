"""Streaming watches: one held HTTP response per watcher, newline-delimited JSON, fed from this node's change
log as states are applied.

The fan-out is built for cost, as etcd's watchableStore and the Kubernetes watch cache group their watchers:

- Streams that ask for the same thing (the same prefixes, filter and `prev_value`) form one group. An applied
  state finds the groups it concerns by the prefixes its changed keys start with (one lookup per distinct
  prefix, not per stream), encodes each event once, joins a group's lines and frames them once (as one HTTP
  chunk: the web layer gives the hub its framing), and then writes those same bytes to each stream of the
  group: the work per stream is one `transport.write`.
- Nothing of this runs on the master's write path: a node delivers what it applied, to its own streams, after
  the effects of that state (the write's answer among them) have been handed to the event loop.
- A stream that its client does not read fills its connection's buffers: the kernel's (set to half of
  `buffer_size`, which the kernel doubles) and then the event loop's. Once more than `buffer_size` bytes wait
  in the latter, the stream ends with a final `{"type":"closed","version","reason"}` line: the client resumes
  from the last version it finished, and a slow watcher costs the node about twice that buffer, never a write.
- Every `progress_interval`, each stream that was sent nothing since the previous round gets a
  `{"type":"progress","version"}` line: everything up to that version has been delivered.
- A stream ends with a `closed` line too when its node stops, or loses its master (as etcd's watches with
  `WithRequireLeader`): what it would serve then may be stale. A `local` stream goes on without a master.

The stream's start is fixed before anything is sent: the response's `X-Coordinated-After-Version` header is the
version after which it reports every change (the `after_version` asked for, or the node's version when a stream
"from now" started), so a client whose stream breaks before its first line resumes from there, missing nothing.

Lines: `{"type":"put","key","value","version"}` and `{"type":"delete","key","value":null,"version"}`, each with
`"prev_value"` when the stream asked for it and the key existed before; `progress`; a final `gone` (the version
to resume from is older than the change log) or `closed`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from coordinated.sidecar.features.change_log import ChangeLog, Step, WatchEvent, prefixes_touched

log = logging.getLogger("coordinated.watch")


Filter = Literal["put", "delete"] | None
# The response header that tells a stream's client where the stream starts: every change after this version.
AFTER_VERSION_HEADER = "X-Coordinated-After-Version"
_ENCODER = msgspec.json.Encoder()
# A stream's final line is written even into a full buffer; its connection closes once that is sent, or after
# this long if the client never reads it.
CLOSE_GRACE_S = 30.0
STOPPING = "this node is stopping: watch through another node"
LOST_MASTER = "this node lost its master, so what it serves may be stale: watch through another node"


class _Line(msgspec.Struct, omit_defaults=True):
    type: str
    key: str
    value: Any
    version: int
    prev_value: Any | msgspec.UnsetType = msgspec.UNSET


def event_line(event: WatchEvent, prev_value: bool) -> bytes:
    prev = event.prev if prev_value and event.had_prev else msgspec.UNSET
    return _ENCODER.encode(_Line(event.type, event.key, event.value, event.version, prev)) + b"\n"


def line(**fields: Any) -> bytes:
    return _ENCODER.encode(fields) + b"\n"


GroupKey = tuple[tuple[str, ...], Filter, bool]


@dataclass(eq=False)
class Stream:
    transport: Any  # asyncio.Transport (aiohttp's connection)
    group: GroupKey
    version: int  # everything up to this version has been written to the connection
    ended: asyncio.Future[str]  # resolved with why the stream ended
    needs_master: bool = True  # ends when the node loses its master (every stream but a `local` one)
    fed: bool = False  # something was written since the last progress round


@dataclass
class _Group:
    prefixes: tuple[str, ...]
    filter: Filter
    prev_value: bool
    streams: set[Stream] = field(default_factory=set)

    def lines(self, events: Sequence[WatchEvent], encoded: dict[tuple[int, bool], bytes]) -> list[bytes]:
        """This group's lines of a step, each event encoded once for every group that shares it."""
        found = []
        for index, event in enumerate(events):
            if (self.filter is None or event.type == self.filter) and event.key.startswith(self.prefixes):
                key = (index, self.prev_value and event.had_prev)
                data = encoded.get(key)
                if data is None:
                    data = encoded[key] = event_line(event, key[1])
                found.append(data)
        return found


class StreamHub:
    def __init__(self, change_log: ChangeLog, buffer_size: int, frame: Callable[[bytes], bytes]) -> None:
        """`frame` turns lines into the bytes of the streams' connections (an HTTP chunk)."""
        self.log = change_log
        self.buffer_size = buffer_size
        self.frame = frame
        self._groups: dict[GroupKey, _Group] = {}
        self._by_prefix: dict[str, set[GroupKey]] = {}
        self.closed = False
        self.delivered = 0  # lines' chunks written, over all streams (for the benchmark and tests)

    @property
    def streams(self) -> int:
        return sum(len(group.streams) for group in self._groups.values())

    def add(
        self,
        transport: Any,
        prefixes: tuple[str, ...],
        filter_: Filter,
        prev_value: bool,
        version: int,
        needs_master: bool = True,
    ) -> Stream:
        """A stream that has been sent everything up to `version`, the change log's current version: from now
        on it is fed as states are applied. The caller awaits `ended`."""
        key: GroupKey = (tuple(sorted(set(prefixes))), filter_, prev_value)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group(key[0], filter_, prev_value)
            for prefix in key[0]:
                self._by_prefix.setdefault(prefix, set()).add(key)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # The kernel's share of what waits unread is bounded too (its autotuning would grow it to megabytes
            # per connection): a stream then buffers at most about twice `buffer_size`.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, max(4096, self.buffer_size // 2))
        stream = Stream(transport, key, version, asyncio.get_running_loop().create_future(), needs_master)
        group.streams.add(stream)
        if self.closed:
            self.end(stream, STOPPING)
        return stream

    def remove(self, stream: Stream) -> None:
        group = self._groups.get(stream.group)
        if group is None or stream not in group.streams:
            return
        group.streams.discard(stream)
        if not group.streams:
            del self._groups[stream.group]
            for prefix in group.prefixes:
                keys = self._by_prefix[prefix]
                keys.discard(stream.group)
                if not keys:
                    del self._by_prefix[prefix]

    def deliver(self, step: Step) -> None:
        """Write a newly applied step's events to the streams they concern."""
        if not self._groups:
            return
        keys = sorted({event.key for event in step.events})
        encoded: dict[tuple[int, bool], bytes] = {}
        touched = {key for prefix in prefixes_touched(list(self._by_prefix), keys) for key in self._by_prefix[prefix]}
        for key in touched:
            group = self._groups[key]
            lines = group.lines(step.events, encoded)
            if not lines:
                continue
            data = self.frame(b"".join(lines))
            for stream in list(group.streams):
                # A stream that joined after this step was recorded had it in its backlog.
                if stream.version < step.version:
                    self._write(stream, data, step.version)

    def progress(self) -> None:
        """One progress line, encoded once, to every stream fed nothing since the last round."""
        if not self._groups:
            return
        version = self.log.version
        data = self.frame(line(type="progress", version=version))
        for group in list(self._groups.values()):
            for stream in list(group.streams):
                if not stream.fed:
                    self._write(stream, data, version)
                stream.fed = False

    def _write(self, stream: Stream, data: bytes, version: int) -> None:
        transport = stream.transport
        if transport.is_closing():
            self.end(stream, "the client closed the connection")
            return
        transport.write(data)
        self.delivered += 1
        stream.version = max(stream.version, version)
        stream.fed = True
        if transport.get_write_buffer_size() > self.buffer_size:
            self.end(
                stream,
                f"the watcher fell behind: more than {self.buffer_size} bytes of this stream were waiting to be read",
            )

    def end(self, stream: Stream, why: str) -> None:
        """The stream ends; unless its client is gone, with a final `closed` line that says why."""
        self.remove(stream)
        if stream.ended.done():
            return
        if not stream.transport.is_closing():
            reason = f"{why}; resume from the last version you finished"
            stream.transport.write(self.frame(line(type="closed", version=stream.version, reason=reason)))
        stream.ended.set_result(why)

    def lost_master(self) -> None:
        """The node has no master: what it applies may be stale, so every stream but the local ones ends."""
        for group in list(self._groups.values()):
            for stream in list(group.streams):
                if stream.needs_master:
                    self.end(stream, LOST_MASTER)

    def close(self) -> None:
        """The node is stopping: every stream ends."""
        self.closed = True
        for group in list(self._groups.values()):
            for stream in list(group.streams):
                self.end(stream, STOPPING)


def after_version_problem(after: int, version: int) -> str | None:
    """Why a watch may not start after version `after` when the cluster is at `version` (after the read
    barrier: the master's committed version when the request came), or None. A version no state has had yet
    would silently skip every change up to it."""
    if after <= version:
        return None
    return (
        f"parameter [after_version] is [{after}], beyond the cluster's version [{version}]: no state has that "
        f"version yet, so the watch would skip every change up to it. Watch from a version this cluster gave "
        f"(a read's or a watch's), or leave [after_version] out to watch from now"
    )
