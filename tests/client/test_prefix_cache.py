"""`PrefixCache` and `AsyncPrefixCache` against real node processes: under kill -9 of the node serving the
cache and of the master, the copy ends equal to a fresh range read, and the listeners saw every change."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import pytest
from client_drivers import Driver

from coordinated.client import AsyncPrefixCache, CacheChange, PrefixCache
from coordinated.tools.localcluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def start(driver: Driver, client: Any, prefix: str) -> Any:
    cache = driver.pick(PrefixCache, AsyncPrefixCache)(client, prefix)

    async def start_on_the_loop() -> None:
        cache.start()

    if driver.loop is None:
        cache.start()
    else:
        driver.run(start_on_the_loop())
    return cache


def wait_until(driver: Driver, done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout}s")
        driver.sleep(0.05)


def test_the_copy_equals_a_fresh_range_read_after_kills(
    driver: Driver, make_cluster: Callable[..., LocalCluster]
) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master()
    serving = next(node for node in nodes if node is not master)
    writer = driver.client([node.url for node in nodes], retry_timeout=30)
    # The cache lists and watches through a follower (it stays on its first address until that fails).
    reader = driver.client(
        [serving.url, *(node.url for node in nodes if node is not serving)], follow_master=False, retry_timeout=30
    )
    for number in range(12):
        driver.run(writer.put(f"c/{number}", number))
    driver.run(writer.put("elsewhere", 0))
    cache = start(driver, reader, "c/")
    seen: dict[str, Any] = {}
    changes: list[CacheChange] = []

    def follow(change: CacheChange) -> None:
        changes.append(change)
        if change.type == "removed":
            seen.pop(change.key)
        elif change.new is not None:
            seen[change.key] = change.new.value

    cache.listen(follow)
    counter = itertools.count()

    def write_some(count: int) -> int:
        version = 0
        for _ in range(count):
            number = next(counter)
            key = f"c/{number % 17}"
            if number % 5 == 4:
                version = driver.run(writer.delete(key)).version
            else:
                version = driver.run(writer.put(key, number)).version
        return version

    try:
        wait_until(driver, cache.initialized.is_set, 30, "the cache was not initialized")
        assert changes[-1].type == "initialized" and len(changes) == 13
        write_some(10)
        cluster.kill(serving)
        write_some(20)
        cluster.start(serving.name)
        cluster.wait_http(serving)
        cluster.wait_master(timeout=30, nodes=3)
        write_some(10)
        cluster.kill(cluster.wait_master())
        last = write_some(20)
        wait_until(driver, lambda: (cache.version or 0) >= last, 60, "the cache did not catch up")
        fresh = driver.run(writer.list_prefix("c/"))
        expected = {kv.key: (kv.value, kv.version, kv.create_version) for kv in fresh.keys}
        copy = {key: (kv.value, kv.version, kv.create_version) for key, kv in cache.entries().items()}
        assert copy == expected
        assert seen == fresh.values()
        assert "elsewhere" not in copy
    finally:
        if driver.loop is None:
            cache.close()
        else:
            driver.run(cache.aclose())
        driver.close(writer)
        driver.close(reader)
