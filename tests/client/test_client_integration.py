"""The client library against real node processes, with the blocking and the asyncio client alike: every
call, master following and failover, tokens."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from client_drivers import Driver

from coordinated.client import AuthenticationError, NotFound, VersionConflict, get_op, put_op
from coordinated.tools.localcluster import FAST_SETTINGS, LocalCluster

pytestmark = pytest.mark.timeout(120)


def test_calls_master_following_and_failover(driver: Driver, make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master()
    follower = next(node for node in nodes if node is not master)
    # The follower's address first: the client finds the master's among them.
    client = driver.client([follower.url, *(node.url for node in nodes if node is not follower)], retry_timeout=30)
    watcher = driver.client([node.url for node in nodes], retry_timeout=30)
    try:
        created = driver.run(client.create("app/counter", 0))
        assert client.endpoints.current == master.url
        with pytest.raises(VersionConflict):
            driver.run(client.create("app/counter", 5))
        got = driver.run(client.get("app/counter"))
        assert (got.value, got.version, got.create_version) == (0, created.version, created.version)
        bumped = driver.run(client.cas("app/counter", 1, version=created.version))
        with pytest.raises(VersionConflict):
            driver.run(client.cas("app/counter", 2, version=created.version))
        result = driver.run(
            client.txn(
                [("app/counter", bumped.version)],
                [put_op("app/other", "x"), get_op("app/counter")],
                [get_op("app/other")],
            )
        )
        assert result.succeeded and result.results[1]["value"] == 1
        batch = driver.run(client.watch_once("app/", created.version - 1, timeout=1))
        assert [(e.type, e.key) for e in batch.events] == [
            ("put", "app/counter"),
            ("put", "app/counter"),
            ("put", "app/other"),
        ]
        driver.run(client.delete("app/other"))
        with pytest.raises(NotFound):
            driver.run(client.get("app/other"))
        assert driver.run(client.get("app/counter", local=True)).value == 1
        health = driver.run(client.cluster_health())
        assert health["number_of_nodes"] == 3 and health["status"] == "green"
        assert driver.run(client.cluster_state(local=True))["metadata"]["kv"]["app/counter"] == 1

        # A watch in the background keeps going through a master kill.
        follow = driver.start(
            lambda: driver.take_until(watcher.watch("w/", batch.version), lambda e: e.key == "w/last")
        )
        driver.run(client.put("w/first", 1))
        cluster.kill(master)
        driver.run(client.put("w/after-kill", 2))  # retried until a new master commits it
        assert client.endpoints.current != master.url
        new_master = cluster.wait_master(timeout=20, exclude=master)
        driver.run(client.put("w/last", 3))
        assert client.endpoints.current == new_master.url
        seen = driver.result(follow, 30)
        assert [e.key for e in seen if e.type == "put"] == ["w/first", "w/after-kill", "w/last"]
    finally:
        driver.close(client)
        driver.close(watcher)


def test_tokens(driver: Driver, make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    writer, reader = "w" * 24, "r" * 24
    tokens = tmp_path / "tokens"
    tokens.write_text(f"writer {writer}\nreader {reader}\nadmin {'a' * 24}\n")
    cluster = make_cluster(
        settings={**FAST_SETTINGS, "http.auth.tokens_file": str(tokens)},
        client_headers={"Authorization": f"Bearer {'a' * 24}"},
    )
    cluster.bootstrap(1)
    node = cluster.wait_master()
    version = driver.run(driver.client(node.url, token=writer).put("k", 1)).version
    as_reader = driver.client(node.url, token=reader)
    assert driver.run(as_reader.get("k")).version == version
    assert driver.run(as_reader.watch_once("", version - 1, timeout=0)).events[0].key == "k"
    with pytest.raises(AuthenticationError) as refused:
        driver.run(as_reader.put("k", 2))
    assert refused.value.status == 403
    with pytest.raises(AuthenticationError) as refused:
        driver.run(driver.client(node.url).get("k"))
    assert refused.value.status == 401
