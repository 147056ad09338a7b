"""The streaming watch's fan-out on hand-built applied states and fake connections: one chunk per group and
step, shared by its streams; progress only to idle streams; a reader that falls behind is ended."""

from __future__ import annotations

import asyncio
from typing import Any

from coordinated.coordination.state import ClusterState, KeyVersion
from coordinated.sidecar.features import watch_streams
from coordinated.sidecar.features.change_log import ChangeLog
from coordinated.sidecar.features.watch_streams import LOST_MASTER, STOPPING, StreamHub
from coordinated.sidecar.web.http_chunks import chunk


class FakeTransport:
    def __init__(self, buffered: int = 0) -> None:
        self.written: list[bytes] = []
        self.buffered = buffered  # what the client leaves unread
        self.closing = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def get_extra_info(self, name: str) -> Any:
        return None

    def lines(self) -> list[bytes]:
        found = []
        for data in self.written:
            _, payload, _ = data.split(b"\r\n")
            found.extend(payload.splitlines())
        return found


def state(version: int, kv: dict[str, Any]) -> ClusterState:
    return ClusterState(
        cluster_name="c",
        version=version,
        master_node="m",
        kv=kv,
        kv_versions={key: KeyVersion(version, 1) for key in kv},
    )


def test_one_encoding_per_event_and_one_chunk_per_group(monkeypatch: Any) -> None:
    async def run() -> None:
        log = ChangeLog(100)
        hub = StreamHub(log, buffer_size=1 << 20, frame=chunk)
        log.record(state(1, {"a/x": 0, "b/y": 0}))
        same = [FakeTransport() for _ in range(3)]
        streams = [hub.add(t, ("a/",), None, False, 1) for t in same]
        both = FakeTransport()
        hub.add(both, ("b/", "a/"), None, True, 1)
        deletes = FakeTransport()
        hub.add(deletes, ("a/",), "delete", False, 1)
        encoded: list[object] = []
        real = watch_streams.event_line
        monkeypatch.setattr(watch_streams, "event_line", lambda e, p: encoded.append((e.key, p)) or real(e, p))
        log.record(state(2, {"a/x": 1, "b/y": 2, "c": 3}))
        assert log.newest is not None
        hub.deliver(log.newest)
        assert sorted(encoded) == [("a/x", False), ("a/x", True), ("b/y", True)]  # once per event and form
        assert same[0].written == same[1].written == same[2].written and len(same[0].written) == 1
        assert same[0].lines() == [b'{"type":"put","key":"a/x","value":1,"version":2}']
        assert both.lines() == [
            b'{"type":"put","key":"a/x","value":1,"version":2,"prev_value":0}',
            b'{"type":"put","key":"b/y","value":2,"version":2,"prev_value":0}',
        ]
        assert deletes.written == [] and all(stream.version == 2 for stream in streams)
        hub.progress()  # the streams fed since the last round get nothing, the idle one a progress line
        assert deletes.lines() == [b'{"type":"progress","version":2}'] and len(same[0].written) == 1
        hub.progress()
        assert len(same[0].written) == 2 and same[0].lines()[-1] == b'{"type":"progress","version":2}'

    asyncio.run(run())


def test_a_reader_that_falls_behind_is_ended_with_a_closed_line_and_a_gone_client_is_dropped() -> None:
    async def run() -> None:
        log = ChangeLog(100)
        hub = StreamHub(log, buffer_size=1_000, frame=chunk)
        log.record(state(1, {"k": 0}))
        slow, gone, fine = FakeTransport(buffered=5_000), FakeTransport(), FakeTransport()
        streams = [hub.add(t, ("",), None, False, 1) for t in (slow, gone, fine)]
        gone.closing = True
        log.record(state(2, {"k": 1}))
        assert log.newest is not None
        hub.deliver(log.newest)
        assert slow.lines()[-1].startswith(b'{"type":"closed","version":2,"reason":"the watcher fell behind')
        assert streams[0].ended.result().startswith("the watcher fell behind") and gone.written == []
        assert streams[1].ended.result() == "the client closed the connection" and not streams[2].ended.done()
        assert hub.streams == 1
        hub.close()
        assert streams[2].ended.result() == STOPPING and hub.streams == 0
        assert fine.lines()[-1].startswith(b'{"type":"closed","version":2,"reason":"this node is stopping')

    asyncio.run(run())


def test_streams_end_when_their_node_loses_its_master_but_local_ones_go_on() -> None:
    async def run() -> None:
        hub = StreamHub(ChangeLog(100), buffer_size=1_000, frame=chunk)
        linearizable, local = FakeTransport(), FakeTransport()
        ended = hub.add(linearizable, ("",), None, False, 1)
        kept = hub.add(local, ("",), None, False, 1, needs_master=False)
        hub.lost_master()
        assert ended.ended.result() == LOST_MASTER and not kept.ended.done() and hub.streams == 1
        assert linearizable.lines()[-1].startswith(b'{"type":"closed","version":1,"reason":"this node lost its master')

    asyncio.run(run())


def test_a_stream_that_joined_after_a_step_was_recorded_does_not_get_it_twice() -> None:
    async def run() -> None:
        log = ChangeLog(100)
        hub = StreamHub(log, buffer_size=1_000, frame=chunk)
        log.record(state(1, {"k": 0}))
        log.record(state(2, {"k": 1}))  # recorded, its delivery still to come
        step = log.newest
        assert step is not None
        earlier, later = FakeTransport(), FakeTransport()
        hub.add(earlier, ("",), None, False, 1)
        hub.add(later, ("",), None, False, 2)  # its backlog went up to version 2
        hub.deliver(step)
        assert len(earlier.lines()) == 1 and later.written == []

    asyncio.run(run())
