"""Range reads, prefix deletes, `prev_value`, transaction compares and streaming watches against real node
processes, with the blocking and the asyncio client alike."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from client_drivers import Driver

from coordinated.client import Compare, NotFound, delete_op, delete_prefix_op, get_op, put_op
from coordinated.tools.localcluster import FAST_SETTINGS, LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_pages_of_one_version_count_and_prefix_delete(
    driver: Driver, make_cluster: Callable[..., LocalCluster]
) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    cluster.wait_master()
    client = driver.client([node.url for node in nodes], retry_timeout=30)
    try:
        for number in range(25):
            driver.run(client.put(f"r/k{number:02}", number))
        driver.run(client.put("rx", "outside"))

        first = driver.run(client.get_range("r/", limit=10))
        assert [kv.key for kv in first.keys] == [f"r/k{n:02}" for n in range(10)]
        assert first.more and first.next == "r/k09"
        assert all(kv.version == kv.create_version > 0 for kv in first.keys)
        assert [kv.value for kv in driver.run(client.get_range("r/", keys_only=True, limit=3)).keys] == [None] * 3
        assert driver.run(client.count("r/")).count == 25

        # Pages after the first come from its state, whatever is written meanwhile.
        pages = client.range_pages("r/", page_size=10)
        page_one = driver.next(pages)
        driver.run(client.put("r/k15", "changed"))
        driver.run(client.put("r/zz", "new"))
        driver.run(client.delete("r/k20"))
        rest = driver.run(driver.take_until(pages, lambda page: not page.more))
        listed = {kv.key: kv.value for page in [page_one, *rest] for kv in page.keys}
        assert listed == {f"r/k{n:02}": n for n in range(25)}
        assert {page.version for page in [page_one, *rest]} == {page_one.version}

        listing = driver.run(client.list_prefix("r/", page_size=7))
        assert len(listing.keys) == 25 and listing.values()["r/k15"] == "changed" and "r/zz" in listing.values()
        assert listing.version > page_one.version

        deleted = driver.run(client.delete_prefix("r/"))
        assert (deleted.prefix, deleted.deleted) == ("r/", 25)
        assert driver.run(client.count("r/")).count == 0
        assert driver.run(client.get("rx")).value == "outside"
    finally:
        driver.close(client)


def test_prev_value_and_transaction_compares(driver: Driver, make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    node = cluster.bootstrap(1)[0]
    client = driver.client(node.url)
    try:
        created = driver.run(client.put("n", 5, prev_value=True))
        assert created.prev is None
        replaced = driver.run(client.put("n", 6, prev_value=True))
        assert replaced.prev is not None
        assert (replaced.prev.key, replaced.prev.value, replaced.prev.version) == ("n", 5, created.version)
        assert replaced.prev.create_version == created.version
        assert driver.run(client.delete("missing", prev_value=True)).prev is None
        driver.run(client.put("d/1", 1))
        driver.run(client.put("d/2", 2))

        def txn(*compare: Any) -> Any:
            return driver.run(
                client.txn(
                    compare,
                    [put_op("n", 7, prev_value=True), delete_prefix_op("d/")],
                    [get_op("n")],
                )
            )

        refused = txn(Compare.value("n", "<", 6))
        assert not refused.succeeded and refused.results[0]["value"] == 6
        assert not txn(Compare.create_version("n", "!=", created.version)).succeeded
        assert not txn(Compare.absent("n")).succeeded
        assert not txn(Compare.value("missing", "!=", 1)).succeeded  # no value compare holds for a missing key
        done = txn(
            Compare.value("n", "<", 10),
            Compare.value("n", ">", 5),
            Compare.create_version("n", "=", created.version),
            Compare.version("n", "=", replaced.version),
            Compare.exists("n"),
            ("missing", 0),
        )
        assert done.succeeded
        assert done.results[0]["prev"]["value"] == 6
        assert done.results[1] == {"op": "delete_prefix", "prefix": "d/", "deleted": 2, "more": False}
        assert driver.run(client.count("d/")).count == 0
        gone = driver.run(client.txn([Compare.exists("n")], [delete_op("n", prev_value=True)]))
        assert gone.results[0]["prev"]["value"] == 7
        with pytest.raises(NotFound):
            driver.run(client.get("n"))
    finally:
        driver.close(client)


def test_a_stream_resumes_after_its_node_is_killed(driver: Driver, make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master()
    serving = next(node for node in nodes if node is not master)
    writer = driver.client([node.url for node in nodes], retry_timeout=30)
    # A follower serves the stream: the watcher stays on its first address until that fails.
    others = [node.url for node in nodes if node is not serving]
    watcher = driver.client([serving.url, *others], follow_master=False, retry_timeout=30)
    try:
        start = driver.run(writer.put("s/start", 0)).version
        follow = driver.start(
            lambda: driver.take_until(watcher.watch(["s/", "t/"], start, prev_value=True), lambda e: e.key == "t/last")
        )
        written = []
        for number in range(40):
            key = f"s/{number % 7}"
            driver.run(writer.put(key, number))
            written.append((key, number))
            if number == 15:
                cluster.kill(serving)
        driver.run(writer.put("t/last", "end"))
        seen = driver.result(follow, 60)
        assert [(e.key, e.value) for e in seen if e.type == "put"] == [*written, ("t/last", "end")]
        assert [e.version for e in seen] == sorted(e.version for e in seen)
        assert seen[7].prev_value == 0  # s/0 was written with 0, then 7
        assert watcher.endpoints.current != serving.url
    finally:
        driver.close(writer)
        driver.close(watcher)


def test_a_stream_older_than_the_change_log_resets_from_a_range_read(
    driver: Driver, make_cluster: Callable[..., LocalCluster]
) -> None:
    cluster = make_cluster(settings={**FAST_SETTINGS, "watch.change_log.size": "5"})
    node = cluster.bootstrap(1)[0]
    client = driver.client(node.url)
    try:
        first = driver.run(client.put("g/0", 0)).version
        for number in range(1, 12):
            driver.run(client.put(f"g/{number}", number))
        driver.run(client.delete("g/3"))
        follow = driver.start(lambda: driver.take_until(client.watch("g/", first), lambda e: e.key == "g/after"))
        driver.sleep(1.0)
        driver.run(client.put("g/after", "x"))
        seen = driver.result(follow, 30)
        assert (seen[0].type, seen[0].key) == ("reset", "g/")
        reset_puts = {e.key: e.value for e in seen[1:-1]}
        assert reset_puts == {f"g/{n}": n for n in range(12) if n != 3}
        assert (seen[-1].type, seen[-1].key) == ("put", "g/after")
    finally:
        driver.close(client)
