"""Watches on real node processes: events in order, prefixes, deletes, timeouts, local, 410, and a watch
that follows the cluster through a master kill without missing a change."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest

from coordinated.tools.localcluster import LocalCluster, LocalNode

pytestmark = pytest.mark.timeout(120)


def watch(node: LocalNode, prefix: str, after: int | None, wait: str = "10s", **extra: str) -> tuple[int, Any]:
    query = f"prefix={quote(prefix)}&timeout={wait}"
    if after is not None:
        query += f"&after_version={after}"
    for name, value in extra.items():
        query += f"&{name}={value}"
    return node.get(f"/_cluster/metadata/_watch?{query}", timeout=30)


def summary(body: dict[str, Any]) -> list[tuple[str, str, Any]]:
    return [(e["type"], e["key"], e["value"]) for e in body["events"]]


def test_events_prefixes_deletes_timeouts_and_local(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master()
    follower = next(node for node in nodes if node is not master)
    _, start = master.put("/_cluster/metadata/start", 0)
    start_version = start["version"]
    master.put("/_cluster/metadata/app/a", 1)
    master.put("/_cluster/metadata/other/b", 2)
    master.put("/_cluster/metadata/app/c", 3)
    _, deleted = master.request("DELETE", "/_cluster/metadata/app/a")

    status, body = watch(follower, "app/", start_version)
    assert status == 200, body
    assert summary(body) == [("put", "app/a", 1), ("put", "app/c", 3), ("delete", "app/a", None)]
    versions = [e["version"] for e in body["events"]]
    assert versions == sorted(versions) and versions[-1] == deleted["version"] == body["version"]

    # Nothing new under the prefix: the watch waits for the timeout, then answers with no events.
    status, quiet = watch(follower, "app/", body["version"], wait="300ms")
    assert status == 200 and quiet["events"] == [] and quiet["version"] >= body["version"]

    # A waiting watch returns with the change, and only with changes under its prefix.
    results: dict[str, Any] = {}

    def waiting(name: str, node: LocalNode, prefix: str, **extra: str) -> threading.Thread:
        def run() -> None:
            results[name] = watch(node, prefix, body["version"], wait="20s", **extra)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    threads = [
        waiting("app", follower, "app/"),
        waiting("local", nodes[-1] if nodes[-1] is not follower else nodes[0], "app/", local="true"),
        waiting("missing", follower, "app/missing"),
    ]
    time.sleep(0.5)
    master.put("/_cluster/metadata/other/x", 4)  # touches no watched prefix
    master.put("/_cluster/metadata/app/d", 5)
    for thread in threads[:2]:
        thread.join(25)
    for name in ("app", "local"):
        status, answer = results[name]
        assert status == 200 and summary(answer) == [("put", "app/d", 5)], (name, answer)
    assert "missing" not in results  # still waiting: no key under its prefix changed
    _, metrics = follower.get("/metrics")
    assert "coordinated_watches_waiting 1.0" in metrics
    master.put("/_cluster/metadata/app/missing", 6)
    threads[2].join(25)
    assert summary(results["missing"][1]) == [("put", "app/missing", 6)]

    # Without after_version, a watch starts from now.
    status, now = watch(follower, "app/", None, wait="200ms")
    assert status == 200 and now["events"] == [] and now["version"] >= results["missing"][1]["version"]


def test_bad_watch_parameters_get_400_naming_them(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    cluster.bootstrap(1)
    node = cluster.wait_master()
    for query, named in (
        ("timeout=10m", "timeout"),
        ("timeout=soon", "timeout"),
        ("after_version=-1", "after_version"),
        ("after_version=x", "after_version"),
        ("prefix=_sessions", "prefix"),
        ("local=maybe", "local"),
        ("since=3", "since"),
        ("after_version=999999999", "beyond the cluster's version"),
        ("after_version=999999999&stream=true", "beyond the cluster's version"),
    ):
        status, body = node.get(f"/_cluster/metadata/_watch?{query}")
        assert status == 400, (query, body)
        assert named in body["error"]["reason"], (query, body)
        assert body["error"]["type"] == "illegal_argument_exception" and body["status"] == 400
    # A local watch is this node's view, which may lag: beyond its version, it waits as for any quiet prefix.
    status, body = node.get("/_cluster/metadata/_watch?after_version=999999999&local=true&timeout=0s")
    assert status == 200 and body["events"] == []


def test_a_version_older_than_the_change_log_is_gone(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(settings={**cluster_settings(), "watch.change_log.size": "3"})
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master()
    _, start = master.put("/_cluster/metadata/start", 0)
    for i in range(6):
        master.put(f"/_cluster/metadata/k{i}", i)
    status, body = watch(master, "", start["version"])  # the master applies every state it commits, one by one
    assert status == 410, body
    assert body["error"]["type"] == "resource_gone_exception"
    for node in nodes:
        # A follower that lagged may have applied several states as one step, which the log keeps whole; more
        # writes push that step out too.
        for extra in range(20):
            status, body = watch(node, "", start["version"])
            if status == 410:
                break
            master.put(f"/_cluster/metadata/more{extra}", extra)
        assert status == 410, body
        _, last = master.put("/_cluster/metadata/last", "x")
        status, body = watch(node, "", last["version"] - 1, wait="1s")
        assert status == 200 and summary(body) == [("put", "last", "x")]


def cluster_settings() -> dict[str, str]:
    from coordinated.tools.localcluster import FAST_SETTINGS

    return dict(FAST_SETTINGS)


def test_a_watch_through_a_master_kill_misses_nothing(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master()
    _, start = master.put("/_cluster/metadata/start", 0)
    acked: dict[str, int] = {}
    seen: list[dict[str, Any]] = []
    stop = threading.Event()
    watcher_done = threading.Event()
    gone: list[Any] = []

    def writer() -> None:
        i = 0
        while not stop.is_set():
            for node in nodes:
                if stop.is_set() or not node.alive():
                    continue
                try:
                    status, body = node.put(f"/_cluster/metadata/w/{i:05d}", i, timeout=3)
                except OSError:
                    continue
                if status == 200:
                    acked[f"w/{i:05d}"] = body["version"]
                i += 1

    def watcher() -> None:
        after = start["version"]
        turn = 0
        while not watcher_done.is_set():
            node = nodes[turn % len(nodes)]  # a different node on each request: failover is routine
            turn += 1
            if not node.alive():
                continue
            try:
                status, body = watch(node, "w/", after, wait="1s")
            except OSError:
                continue
            if status == 410:
                gone.append(body)
                return
            if status != 200:
                time.sleep(0.1)  # no master yet (503): ask again
                continue
            seen.extend(body["events"])
            after = body["version"]

    threads = [threading.Thread(target=writer, daemon=True), threading.Thread(target=watcher, daemon=True)]
    for thread in threads:
        thread.start()
    time.sleep(1.5)
    cluster.kill(master)
    cluster.wait_master(timeout=20, exclude=master)
    time.sleep(1.5)
    stop.set()
    threads[0].join(10)
    # The watcher catches up with the last acknowledged write, then stops.
    last = max(acked.values())
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (not seen or seen[-1]["version"] < last):
        time.sleep(0.1)
    watcher_done.set()
    threads[1].join(10)
    assert not gone, gone
    assert len(acked) > 5
    versions = [event["version"] for event in seen]
    assert versions == sorted(versions) and len(set(versions)) == len(versions), "out of order or repeated"
    puts = {event["key"]: event["version"] for event in seen if event["type"] == "put"}
    missing = {key: version for key, version in acked.items() if puts.get(key) != version}
    assert not missing, f"acknowledged writes the watch missed: {missing}"
