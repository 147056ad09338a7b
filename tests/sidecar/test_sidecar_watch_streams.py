"""Streaming watches on real node processes: the backlog then live changes on one held response, several
prefixes, previous values, filters, progress lines, the final `gone` line, a slow reader ended with a
`closed` line while writes go on, bad parameters, and a master kill: a stream on a follower ends (its node
lost its master) and resumes through another node without a gap, while a local stream carries on."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from coordinated.tools.localcluster import LocalCluster, LocalNode

pytestmark = pytest.mark.timeout(120)

FAST_PROGRESS = {"watch.stream.progress_interval": "200ms"}


@contextmanager
def stream(node: LocalNode, *prefixes: str, **params: Any) -> Iterator[Iterator[dict[str, Any]]]:
    """The stream's lines, decoded, as they arrive (the iterator ends with the response)."""
    query = [("stream", "true"), *(("prefix", prefix) for prefix in prefixes)]
    query += [(name, str(value).lower() if isinstance(value, bool) else str(value)) for name, value in params.items()]
    with (
        httpx.Client(timeout=httpx.Timeout(30.0)) as client,
        client.stream("GET", f"{node.url}/_cluster/metadata/_watch?{urlencode(query)}") as response,
    ):
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"] == "application/x-ndjson"
        yield (json.loads(line) for line in response.iter_lines() if line)


def until(lines: Iterator[dict[str, Any]], done: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    seen = []
    for line in lines:
        seen.append(line)
        if done(line):
            return seen
    raise AssertionError(f"the stream ended first: {seen}")


def changes(lines: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(line["type"], line["key"], line["value"], line.get("prev_value", "-")) for line in lines if "key" in line]


def test_the_backlog_then_live_changes_on_one_response(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(settings=FAST_PROGRESS)
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master()
    follower = next(node for node in nodes if node is not master)
    start = master.put("/_cluster/metadata/start", 0)[1]["version"]
    master.put("/_cluster/metadata/app/a", 1)
    master.put("/_cluster/metadata/other/x", 9)
    # Acknowledged before the stream starts: the stream's read barrier makes the follower serve it.
    master.put("/_cluster/metadata/jobs/1", "queued")
    with stream(follower, "app/", "jobs/", after_version=start, prev_value=True) as lines:
        backlog = until(lines, lambda line: line["type"] == "progress")
        assert changes(backlog) == [("put", "app/a", 1, "-"), ("put", "jobs/1", "queued", "-")]
        master.put("/_cluster/metadata/app/a", 2)
        master.put("/_cluster/metadata/other/x", 10)  # under no prefix of the stream
        deleted = master.request("DELETE", "/_cluster/metadata/jobs/1")[1]
        live = until(lines, lambda line: line.get("key") == "jobs/1")
        assert changes(live) == [("put", "app/a", 2, 1), ("delete", "jobs/1", None, "queued")]
        assert live[-1]["version"] == deleted["version"]
        quiet = until(lines, lambda line: line["type"] == "progress")  # idle: progress within 200ms or so
        assert quiet[-1]["version"] >= deleted["version"]

    with stream(follower, "app/", after_version=start, filter="delete") as lines:
        master.request("DELETE", "/_cluster/metadata/app/a")
        assert changes(until(lines, lambda line: "key" in line)) == [("delete", "app/a", None, "-")]

    # Where a stream starts comes first, with the headers: the after_version asked for, or, from now, the
    # version the node is at after its read barrier (every write acknowledged before is at or below it).
    acknowledged = master.put("/_cluster/metadata/app/b", 3)[1]["version"]
    with httpx.Client(timeout=httpx.Timeout(30.0)) as client:
        for query in (f"&after_version={start}", ""):
            url = f"{follower.url}/_cluster/metadata/_watch?stream=true{query}"
            with client.stream("GET", url) as response:
                after = int(response.headers["X-Coordinated-After-Version"])
                assert after == start if query else after >= acknowledged, (query, after)


def test_gone_bad_parameters_and_a_slow_reader(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(settings={**FAST_PROGRESS, "watch.change_log.size": "5", "watch.stream.buffer_size": "64kb"})
    [node] = cluster.bootstrap(1)
    cluster.wait_master()
    first = node.put("/_cluster/metadata/k", 0)[1]["version"]
    for index in range(10):
        node.put(f"/_cluster/metadata/k{index}", index)
    with stream(node, "k", after_version=first) as lines:
        [gone] = list(lines)
        assert gone["type"] == "gone" and gone["version"] > gone["oldest"] > first, gone

    bad = [
        ("filter=set", "[filter] must be [put] or [delete]"),
        ("timeout=5s", "a stream has no [timeout]"),
        ("prefix=_x", "reserved"),
    ]
    for query, reason in bad:
        status, body = node.get(f"/_cluster/metadata/_watch?stream=true&{query}")
        assert status == 400 and reason in body["error"]["reason"], (query, body)
    for query, reason in (("prefix=a&prefix=b", "need [stream=true]"), ("prev_value=true", "needs [stream=true]")):
        status, body = node.get(f"/_cluster/metadata/_watch?{query}")
        assert status == 400 and reason in body["error"]["reason"], (query, body)

    # A reader that stops reading: the node ends its stream once 64 KB wait unread, and writes go on.
    big = "x" * 20_000
    with httpx.Client(timeout=httpx.Timeout(30.0)) as client:
        url = f"{node.url}/_cluster/metadata/_watch?stream=true&prefix=big/"
        with client.stream("GET", url) as response:
            assert response.status_code == 200
            for index in range(200):  # 4 MB, far more than the socket buffers and the stream's 64 KB
                status, _ = node.put(f"/_cluster/metadata/big/{index % 5}", f"{index}{big}")
                assert status == 200
            last = None
            for raw in response.iter_lines():
                if raw:
                    last = json.loads(raw)
    assert last is not None and last["type"] == "closed" and "fell behind" in last["reason"], last
    status, metrics = node.get("/metrics")
    assert "coordinated_watch_streams 0.0" in metrics


def test_a_master_kill_ends_a_stream_which_resumes_without_a_gap_and_a_local_stream_carries_on(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = make_cluster(settings=FAST_PROGRESS)
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master()
    follower = next(node for node in nodes if node is not master)
    written: list[int] = []
    stop = threading.Event()

    def writer() -> None:
        index = 0
        while not stop.is_set():
            for node in cluster.running():
                try:
                    if node.put(f"/_cluster/metadata/w/{index:04d}", index, timeout=2)[0] == 200:
                        written.append(index)
                        index += 1
                        break
                except OSError:
                    continue
            time.sleep(0.02)

    thread = threading.Thread(target=writer, daemon=True)
    try:
        with stream(follower, "w/", local=True) as local, stream(follower, "w/", after_version=0) as lines:
            thread.start()
            first = until(lines, lambda line: line.get("value", -1) >= 5)
            cluster.kill(master)
            first += until(lines, lambda line: line["type"] == "closed")
            assert "lost its master" in first[-1]["reason"], first[-1]
            assert cluster.wait_master(timeout=30, exclude=master) is not None
            mark = len(written)
            kept = until(local, lambda line: line.get("value", -1) >= mark + 5)  # a local stream goes on
        # Every line before `closed` was read: resume from its version, through another node.
        resumed_on = next(node for node in cluster.running() if node is not follower)
        with stream(resumed_on, "w/", after_version=first[-1]["version"]) as lines:
            second = until(lines, lambda line: line.get("value", -1) >= mark + 5)
    finally:
        stop.set()
        thread.join(10)
    seen = {line["value"] for line in [*first, *second] if line["type"] == "put"}
    assert set(range(mark + 6)) <= seen, sorted(set(range(mark + 6)) - seen)  # no acknowledged write missed
    local_values = [line["value"] for line in kept if line["type"] == "put"]
    assert local_values == sorted(local_values) and mark + 5 in local_values


def test_a_node_with_a_stream_open_stops_gracefully_and_ends_the_stream_with_a_closed_line(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    """The streams end before the server waits for its open requests: the node stops at once (exit 0, as a
    rolling restart needs), instead of waiting out the server's shutdown timeout and being killed."""
    cluster = make_cluster()
    node = cluster.bootstrap(1)[0]
    assert node.put("/_cluster/metadata/s/a", 1)[0] == 200
    received: list[dict[str, Any]] = []
    with stream(node, "s/", after_version=0) as lines:
        received += until(lines, lambda line: line["type"] == "put")
        assert cluster.stop(node, timeout=20) == 0  # killed (-9) after 20 s without it
        received += list(lines)
    assert received[-1]["type"] == "closed" and "this node is stopping" in received[-1]["reason"], received
