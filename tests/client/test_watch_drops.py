"""A watch "from now" loses nothing wherever its stream is dropped: a proxy drops the stream at every point of
its life (before the request reaches the node; after the request, before any byte of the answer; inside and
at the end of the status line, of each header, of the headers; inside and after each chunk and each line,
between the two events of one transaction) and writes a change in the window before the client resumes.
Every change after the watch's start (the first `progress` event, given as soon as the stream's answer
names its start) is reported once, in order. Also: a blocking watch stops at once when closed from another
thread, and a watch from a version beyond the cluster's is refused."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from network_proxy import BEFORE_REQUEST, NetworkProxy

from coordinated.client import BadRequest, Client, WatchEvent, delete_op, put_op
from coordinated.tools.localcluster import LocalCluster, LocalNode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


class Run:
    """One watch from now through the proxy, dropped at `cut`, with the changes written meanwhile."""

    def __init__(self, node: LocalNode, proxy: NetworkProxy, writer: Client, cut: int | None) -> None:
        self.writer = writer
        self.written: list[tuple[str, int]] = []  # (key, version) of every change written during the run
        self.window: int | None = None  # the version of the change written as the stream was dropped
        proxy.arm(cut, self.write_in_window if cut is not None else lambda: None)
        self.watcher = Client(proxy.address, retry_timeout=10, request_timeout=5)
        self.events: list[WatchEvent] = []
        self.stream = self.watcher.watch("drops/", progress=True)
        self.thread = threading.Thread(target=self.collect, daemon=True)
        self.thread.start()

    def collect(self) -> None:
        for event in self.stream:
            self.events.append(event)

    def write_in_window(self) -> None:
        self.window = self.writer.put("drops/window", "in the window").version
        self.written.append(("drops/window", self.window))

    def wait(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 30
        while not condition():
            assert time.monotonic() < deadline, f"not within 30 s: {what}; events {self.events}"
            time.sleep(0.005)

    def script(self) -> None:
        """A put, a transaction of two puts (two events of one version), a delete."""
        self.written.append(("drops/a", self.writer.put("drops/a", 1).version))
        both = self.writer.txn([], [put_op("drops/b", 2), put_op("drops/c", 3)]).version
        self.written += [("drops/b", both), ("drops/c", both)]
        deleted = self.writer.txn([], [delete_op("drops/a")]).version
        self.written.append(("drops/a", deleted))

    def finish(self, marker: int) -> list[WatchEvent]:
        version = self.writer.put("drops/marker", marker).version
        self.written.append(("drops/marker", version))
        self.wait(lambda: any(e.key == "drops/marker" and e.value == marker for e in self.events), "the marker")
        self.stream.close()
        self.thread.join(10)
        assert not self.thread.is_alive()
        self.watcher.close()
        return self.events


def boundaries(answer: bytes) -> list[int]:
    """Every point of a stream's answer worth a drop: each byte just before, at and after each line end (the
    status line, each header, the headers' end, each chunk's size line, each event line, each chunk's end)."""
    points = {0, 1}
    for index, byte in enumerate(answer):
        if byte == ord("\n"):
            points |= {index, index + 1, index + 2}
    return sorted(point for point in points if point < len(answer))


@pytest.fixture
def node(make_cluster: Callable[..., LocalCluster]) -> Iterator[LocalNode]:
    cluster = make_cluster()
    node = cluster.bootstrap(1)[0]
    with Client(node.url) as writer:
        for number in range(100):  # versions of three digits for the whole test: the answers keep their length
            writer.put(f"before/{number}", number)
    yield node


def test_a_watch_from_now_dropped_at_every_point_of_its_stream_misses_nothing(node: LocalNode) -> None:
    proxy = NetworkProxy(("127.0.0.1", node.http_port))
    writer = Client(node.url)
    try:
        reference = Run(node, proxy, writer, None)
        reference.wait(lambda: bool(reference.events), "the start")
        reference.script()
        reference.wait(lambda: len(reference.events) == 5, "the script's changes")
        answer = bytes(proxy.answered)
        reference.finish(-1)
        headers_end = answer.index(b"\r\n\r\n") + 4
        assert b"X-Coordinated-After-Version: " in answer[:headers_end]
        points = [BEFORE_REQUEST, *boundaries(answer)]
        assert len(points) > 30, points
        for cut in points:
            run = Run(node, proxy, writer, cut)
            run.wait(lambda run=run: bool(run.events), "the start")  # type: ignore[misc]
            run.script()
            run.wait(proxy.dropped.is_set, f"the drop at {cut}")
            events = run.finish(cut)
            start, changes = events[0], [event for event in events[1:] if event.type != "progress"]
            assert start.type == "progress", events
            expected = sorted((version, key) for key, version in run.written if version > start.version)
            assert [(e.version, e.key) for e in changes] == expected, (cut, start, run.written, events)
            if cut >= headers_end:  # the client had the start: the change in the window is after it
                assert run.window is not None and run.window > start.version, (cut, start, run.window)
    finally:
        writer.close()
        proxy.close()


def test_a_blocking_watch_closed_from_another_thread_ends_at_once(node: LocalNode) -> None:
    """The stream sends nothing (no change, and a progress line only every 10 s): `close()` from another
    thread ends the `next()` waiting for it, long before any line could come."""
    with Client(node.url) as client:
        stream = client.watch("quiet/")
        ended: list[Any] = []

        def consume() -> None:
            ended.extend(stream)  # blocks in next(): nothing comes

        consumer = threading.Thread(target=consume, daemon=True)
        consumer.start()
        time.sleep(0.5)
        assert consumer.is_alive()
        stream.close()
        consumer.join(5)
        assert not consumer.is_alive() and ended == []
        assert list(stream) == []  # closed for good


def test_a_watch_from_beyond_the_clusters_version_is_refused(node: LocalNode) -> None:
    with Client(node.url, retry_timeout=0) as client:
        now = client.count().version
        for far in (now + 1, now + 10**9):
            with pytest.raises(BadRequest, match=r"\[after_version\] is \[\d+\], beyond the cluster's version"):
                client.watch_once("k", far, timeout=0)
            with pytest.raises(BadRequest, match="beyond the cluster's version"):
                next(iter(client.watch("k", far)))
        assert client.watch_once("k", now, timeout=0).version >= now  # up to its version: fine
        local = client.watch_once("k", now + 10, timeout=0, local=True)  # a lagging node's own view: served
        assert local.events == []
