"""The client library against real node processes: every call, master following and failover, tokens,
and the asyncio client."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from coordinated.client import (
    AsyncClient,
    AuthenticationError,
    Client,
    NotFound,
    VersionConflict,
    WatchEvent,
    get_op,
    put_op,
)
from coordinated.tools.localcluster import FAST_SETTINGS, LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_calls_master_following_and_failover(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master()
    follower = next(node for node in nodes if node is not master)
    # The follower's address first: the client finds the master's among them.
    with Client([follower.url, *(node.url for node in nodes if node is not follower)], retry_timeout=30) as client:
        created = client.create("app/counter", 0)
        assert client.endpoints.current == master.url
        with pytest.raises(VersionConflict):
            client.create("app/counter", 5)
        got = client.get("app/counter")
        assert (got.value, got.version, got.create_version) == (0, created.version, created.version)
        bumped = client.cas("app/counter", 1, version=created.version)
        with pytest.raises(VersionConflict):
            client.cas("app/counter", 2, version=created.version)
        result = client.txn(
            [("app/counter", bumped.version)], [put_op("app/other", "x"), get_op("app/counter")], [get_op("app/other")]
        )
        assert result.succeeded and result.results[1]["value"] == 1
        batch = client.watch_once("app/", created.version - 1, timeout=1)
        assert [(e.type, e.key) for e in batch.events] == [
            ("put", "app/counter"),
            ("put", "app/counter"),
            ("put", "app/other"),
        ]
        client.delete("app/other")
        with pytest.raises(NotFound):
            client.get("app/other")
        assert client.get("app/counter", local=True).value == 1

        # A watch iterator in a thread keeps going through a master kill.
        seen: list[WatchEvent] = []
        done = threading.Event()

        def follow() -> None:
            with Client([node.url for node in nodes], retry_timeout=30) as watcher:
                for event in watcher.watch("w/", batch.version, timeout=1):
                    seen.append(event)
                    if event.key == "w/last":
                        done.set()
                        return

        thread = threading.Thread(target=follow, daemon=True)
        thread.start()
        client.put("w/first", 1)
        cluster.kill(master)
        client.put("w/after-kill", 2)  # retried until a new master commits it
        assert client.endpoints.current != master.url
        new_master = cluster.wait_master(timeout=20, exclude=master)
        client.put("w/last", 3)
        assert client.endpoints.current == new_master.url
        assert done.wait(30), seen
        assert [e.key for e in seen if e.type == "put"] == ["w/first", "w/after-kill", "w/last"]


def test_tokens(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    writer, reader = "w" * 24, "r" * 24
    tokens = tmp_path / "tokens"
    tokens.write_text(f"writer {writer}\nreader {reader}\nadmin {'a' * 24}\n")
    cluster = make_cluster(
        settings={**FAST_SETTINGS, "http.auth.tokens_file": str(tokens)},
        client_headers={"Authorization": f"Bearer {'a' * 24}"},
    )
    cluster.bootstrap(1)
    node = cluster.wait_master()
    with Client(node.url, token=writer) as client:
        version = client.put("k", 1).version
    with Client(node.url, token=reader) as client:
        assert client.get("k").version == version
        assert client.watch_once("", version - 1, timeout=0).events[0].key == "k"
        with pytest.raises(AuthenticationError) as refused:
            client.put("k", 2)
        assert refused.value.status == 403
    with Client(node.url) as client, pytest.raises(AuthenticationError) as refused:
        client.get("k")
    assert refused.value.status == 401


def test_the_asyncio_client(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)

    async def scenario() -> list[tuple[str, str]]:
        async with AsyncClient([node.url for node in nodes]) as client:
            created = await client.create("a/x", 1)
            await client.cas("a/x", 2, version=created.version)
            with pytest.raises(VersionConflict):
                await client.cas("a/x", 3, version=created.version)
            assert (await client.get("a/x")).value == 2
            seen: list[tuple[str, str]] = []

            async def follow() -> None:
                async for event in client.watch("a/", created.version):
                    seen.append((event.type, event.key))
                    if event.type == "delete":
                        return

            task = asyncio.create_task(follow())
            await client.put("b/ignored", 0)
            await client.delete("a/x")
            await asyncio.wait_for(task, 20)
            return seen

    assert asyncio.run(scenario()) == [("put", "a/x"), ("delete", "a/x")]
