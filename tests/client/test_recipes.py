"""Sessions, Lock and LeaderElection through the client library, on real node processes, with the blocking
and the asyncio client alike."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from client_drivers import Driver

from coordinated.client import (
    AsyncLeaderElection,
    AsyncLock,
    LeaderElection,
    Lock,
    LockTimeout,
    NotFound,
    SessionNotFound,
)
from coordinated.tools.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(120)


def test_sessions_locks_tokens_and_waiting_by_watch(driver: Driver, make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    urls = [node.url for node in nodes]
    lock_class = driver.pick(Lock, AsyncLock)
    one, two = driver.client(urls), driver.client(list(reversed(urls)), follow_master=False)
    first = driver.session(one, ttl=2.0)
    second = driver.session(two, ttl=2.0)
    driver.sleep(1.5)  # keepalives run in the background: the sessions outlive their TTL
    lock_a = lock_class(one, "locks/job", first, data="a")
    lock_b = lock_class(two, "locks/job", second, data="b")
    token_a = driver.run(lock_a.acquire(timeout=5))
    held = driver.run(lock_a.holder())
    # The token is the version of the write that marked the holder's key holding.
    assert (held.key, held.version, held.session, held.value["data"]) == (lock_a.key, token_a, first.id, "a")
    assert held.value["holding"] and held.create_version < token_a
    with pytest.raises(LockTimeout):
        driver.run(lock_b.acquire(timeout=0.5))
    waiter = driver.start(lambda: lock_b.acquire(timeout=30))
    driver.sleep(2.5)  # past the TTL: still held, since the session is kept alive
    assert not waiter.done() and lock_a.held()
    driver.run(lock_a.release())
    token_b = driver.result(waiter, 20)
    assert token_b > token_a
    # Ending the session frees its lock: the next holder gets a larger token again.
    driver.run(second.end())
    with pytest.raises(NotFound):
        driver.run(one.get(lock_b.key))
    with pytest.raises(SessionNotFound):
        driver.run(two.keepalive(second.id))
    token_c = driver.run(lock_class(one, "locks/job", first).acquire(timeout=5))
    assert token_c > token_b
    driver.run(first.end())

    # A session that is no longer kept alive expires, and its key with it.
    abandoned = driver.run(one.create_session(ttl=1.0))
    driver.run(one.create("locks/orphan", 1, session=abandoned.id))
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            driver.run(one.get("locks/orphan"))
        except NotFound:
            break
        driver.sleep(0.2)
    else:
        pytest.fail("the ephemeral key outlived its session")
    driver.close(one)
    driver.close(two)


def test_leader_election_and_observe(driver: Driver, make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    urls = [node.url for node in nodes]
    election_class = driver.pick(LeaderElection, AsyncLeaderElection)
    client, observer = driver.client(urls), driver.client(urls)
    observer_session = driver.session(observer, ttl=5.0)
    watching = election_class(observer, "leaders/x", observer_session, "observer")
    changes = iter(range(1, 4))
    observed = driver.start(lambda: driver.take_until(watching.observe(timeout=1), lambda _: next(changes) == 3))
    driver.sleep(1.0)
    session_a = driver.session(client, ttl=5.0)
    a = election_class(client, "leaders/x", session_a, "pod-a")
    token = driver.run(a.campaign(timeout=5))
    assert a.is_leader() and driver.run(a.leader()) == ("pod-a", token)
    session_b = driver.session(client, ttl=5.0)
    b = election_class(client, "leaders/x", session_b, "pod-b")
    driver.run(a.resign())
    token_b = driver.run(b.campaign(timeout=5))
    assert token_b > token and driver.run(b.leader()) == ("pod-b", token_b)
    seen = driver.result(observed, 20)
    assert seen == [None, ("pod-a", token), ("pod-b", token_b)] or seen == [None, ("pod-a", token), None]
    for session in (session_b, session_a, observer_session):
        driver.run(session.end())
    driver.close(client)
    driver.close(observer)
