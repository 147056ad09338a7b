"""Sessions, Lock and LeaderElection through the client library, on real node processes."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from coordinated.client import (
    AsyncClient,
    AsyncLock,
    Client,
    LeaderElection,
    Lock,
    LockTimeout,
    NotFound,
    SessionNotFound,
)
from coordinated.tools.localcluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_sessions_locks_tokens_and_waiting_by_watch(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    urls = [node.url for node in nodes]
    with Client(urls) as one, Client(list(reversed(urls)), follow_master=False) as two:
        first = one.session(ttl=2.0)
        second = two.session(ttl=2.0)
        time.sleep(1.5)  # keepalives run in the background: the sessions outlive their TTL
        lock_a = Lock(one, "locks/job", first, data="a")
        lock_b = Lock(two, "locks/job", second, data="b")
        token_a = lock_a.acquire(timeout=5)
        held = one.get("locks/job")
        assert (held.create_version, held.session, held.value["data"]) == (token_a, first.id, "a")
        with pytest.raises(LockTimeout):
            lock_b.acquire(timeout=0.5)
        acquired: list[int] = []
        waiter = threading.Thread(target=lambda: acquired.append(lock_b.acquire(timeout=30)), daemon=True)
        waiter.start()
        time.sleep(2.5)  # past the TTL: still held, since the session is kept alive
        assert not acquired and lock_a.held()
        lock_a.release()
        waiter.join(20)
        assert acquired and acquired[0] > token_a
        # Ending the session frees its lock: the next holder gets a larger token again.
        second.end()
        with pytest.raises(NotFound):
            one.get("locks/job")
        with pytest.raises(SessionNotFound):
            two.keepalive(second.id)
        token_c = Lock(one, "locks/job", first).acquire(timeout=5)
        assert token_c > acquired[0]
        first.end()

        # A session that is no longer kept alive expires, and its key with it.
        abandoned = one.create_session(ttl=1.0)
        one.create("locks/orphan", 1, session=abandoned.id)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                one.get("locks/orphan")
            except NotFound:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the ephemeral key outlived its session")


def test_leader_election_and_observe(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    urls = [node.url for node in nodes]
    with Client(urls) as client:
        seen: list[tuple[str, int] | None] = []
        done = threading.Event()

        def observe() -> None:
            with Client(urls) as observer, observer.session(ttl=5.0) as session:
                election = LeaderElection(observer, "leaders/x", session, "observer")
                for leader in election.observe(timeout=1):
                    seen.append(leader)
                    if len(seen) == 3:
                        done.set()
                        return

        threading.Thread(target=observe, daemon=True).start()
        time.sleep(1.0)
        with client.session(ttl=5.0) as session_a:
            a = LeaderElection(client, "leaders/x", session_a, "pod-a")
            token = a.campaign(timeout=5)
            assert a.is_leader() and a.leader() == ("pod-a", token)
            with client.session(ttl=5.0) as session_b:
                b = LeaderElection(client, "leaders/x", session_b, "pod-b")
                a.resign()
                token_b = b.campaign(timeout=5)
                assert token_b > token and b.leader() == ("pod-b", token_b)
                assert done.wait(20), seen
    assert seen == [None, ("pod-a", token), ("pod-b", token_b)] or seen == [None, ("pod-a", token), None]


def test_the_asyncio_lock(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)

    async def scenario() -> tuple[int, int]:
        async with AsyncClient([node.url for node in nodes]) as client:
            one, two = await client.session(ttl=3.0), await client.session(ttl=3.0)
            lock_one, lock_two = AsyncLock(client, "locks/a", one), AsyncLock(client, "locks/a", two)
            first = await lock_one.acquire(timeout=5)
            waiting = asyncio.create_task(lock_two.acquire(timeout=20))
            await asyncio.sleep(0.5)
            assert not waiting.done()
            await one.end()  # the key goes with the session
            second = await asyncio.wait_for(waiting, 20)
            await lock_two.release()
            await two.end()
            return first, second

    first, second = asyncio.run(scenario())
    assert second > first
