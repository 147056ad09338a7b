"""Connection states of session recipes, against scripted answers, for the blocking and the asyncio client: a
holder cut off from every node stops reporting `held()` once the TTL less the safety margin has passed since
its last successful keepalive was sent (`suspended`), even while a keepalive hangs without an answer; it comes
back when a keepalive succeeds again, is `lost` once the cluster says its session ended, and `ended` (not
`lost`) when it ends the session itself."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import pytest
from client_drivers import Driver

from coordinated.client import AsyncLock, ConnectionState, Lock

TTL_S = 0.9


class Cluster:
    """Answers a session, a lock and keepalives, until cut off (every request refused) or the session ends.
    While `hanging`, a keepalive gets no answer until `hanging` is cleared (then a read timeout)."""

    def __init__(self, asynchronous: bool = False) -> None:
        self.asynchronous = asynchronous
        self.cut_off = threading.Event()
        self.session_gone = threading.Event()
        self.hanging = threading.Event()
        self.hung = 0  # keepalives that got no answer
        self.lock_key = ""

    def __call__(self, request: httpx.Request) -> Any:
        if self.hanging.is_set() and request.url.path.endswith("/_keepalive"):
            self.hung += 1
            return self.hang(request)
        return self.answer(request)

    def hang(self, request: httpx.Request) -> Any:
        if not self.asynchronous:
            while self.hanging.is_set():
                time.sleep(0.01)
            raise httpx.ReadTimeout("no answer", request=request)

        async def no_answer() -> httpx.Response:  # the asyncio client's transport awaits it
            while self.hanging.is_set():
                await asyncio.sleep(0.01)
            raise httpx.ReadTimeout("no answer", request=request)

        return no_answer()

    def answer(self, request: httpx.Request) -> httpx.Response:
        if self.cut_off.is_set():
            raise httpx.ConnectError("cut off", request=request)
        path = request.url.path
        if path in ("/_cat/master", "/"):
            return httpx.Response(404, json={})
        if path == "/_sessions":
            return httpx.Response(200, json={"id": "s1", "ttl": "900ms"})
        if path.endswith("/_keepalive"):
            if self.session_gone.is_set():
                error = {"type": "resource_not_found_exception", "reason": "session [s1] not found"}
                return httpx.Response(404, json={"error": error, "status": 404})
            return httpx.Response(200, json={"acknowledged": True})
        if request.method == "GET":  # the listing of the lock's prefix: only this holder's key
            entry = {"key": self.lock_key, "value": {}, "version": 5, "create_version": 5}
            return httpx.Response(200, json={"version": 5, "keys": [entry], "more": False, "next": None})
        self.lock_key = path.removeprefix("/_cluster/metadata/")
        return httpx.Response(200, json={"key": self.lock_key, "term": 1, "version": 5})


def wait_for(driver: Driver, condition: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        driver.sleep(0.05)
    return False


def test_a_holder_cut_off_from_every_node_is_suspended_within_its_ttl_then_reconnects_then_is_lost(
    driver: Driver,
) -> None:
    cluster = Cluster()
    client = driver.client(["127.0.0.1:1"], handler=cluster, retry_timeout=0.1, request_timeout=0.2)
    session = driver.session(client, ttl=TTL_S)
    lock = driver.pick(Lock, AsyncLock)(client, "locks/a", session)
    seen: list[ConnectionState] = []
    lock.add_state_listener(seen.append)
    assert driver.run(lock.acquire(timeout=1)) == 5
    driver.sleep(TTL_S * 1.5)  # keepalives succeed: still held past one TTL
    assert lock.held() and lock.connection_state() is ConnectionState.CONNECTED
    cut_at = time.monotonic()
    cluster.cut_off.set()
    observed: list[tuple[float, bool]] = []  # (when, held()) while cut off
    while time.monotonic() < cut_at + TTL_S * 2:
        observed.append((time.monotonic(), lock.held()))
        driver.sleep(0.05)
    # The last successful keepalive was sent before the cut: never held a whole TTL after it.
    assert not [when - cut_at for when, held in observed if held and when >= cut_at + TTL_S]
    assert observed[-1][1] is False and lock.connection_state() is ConnectionState.SUSPENDED
    assert wait_for(driver, lambda: seen == [ConnectionState.SUSPENDED], TTL_S)
    cluster.cut_off.clear()
    assert wait_for(driver, lambda: lock.held(), TTL_S * 2)  # a keepalive got through: the session lives
    assert wait_for(driver, lambda: seen[-1:] == [ConnectionState.CONNECTED], TTL_S)
    cluster.session_gone.set()
    assert wait_for(driver, lambda: lock.connection_state() is ConnectionState.LOST, TTL_S * 2)
    assert not lock.held()
    assert seen == [ConnectionState.SUSPENDED, ConnectionState.CONNECTED, ConnectionState.LOST]
    driver.close(client)


def test_a_keepalive_that_hangs_does_not_delay_the_suspension(driver: Driver) -> None:
    """The node of the keepalive stops (SIGSTOP, a partition): the keepalive hangs for its whole request
    timeout, and the session's clock still says `suspended` at its TTL less the margin, to the listeners
    too, while that keepalive is still waiting."""
    cluster = Cluster(asynchronous=driver.kind == "asyncio")
    client = driver.client(["127.0.0.1:1"], handler=cluster, retry_timeout=0, request_timeout=30)
    session = driver.session(client, ttl=TTL_S)
    assert session.safety_margin == pytest.approx(TTL_S / 10) and session.lifetime == pytest.approx(TTL_S * 0.9)
    lock = driver.pick(Lock, AsyncLock)(client, "locks/a", session)
    seen: list[tuple[ConnectionState, int]] = []
    lock.add_state_listener(lambda state: seen.append((state, cluster.hung)))
    driver.run(lock.acquire(timeout=1))
    cluster.hanging.set()
    assert wait_for(driver, lambda: seen, TTL_S * 2)
    # Reported while the keepalive sent after the cut was still hanging, by the clock alone.
    assert seen == [(ConnectionState.SUSPENDED, 1)] and cluster.hanging.is_set()
    assert not lock.held()
    cluster.hanging.clear()
    assert wait_for(driver, lambda: lock.held(), TTL_S * 2)
    driver.close(client)


def test_a_session_ended_on_purpose_is_ended_not_lost(driver: Driver) -> None:
    cluster = Cluster()
    client = driver.client(["127.0.0.1:1"], handler=cluster, retry_timeout=0.1, request_timeout=0.2)
    session = driver.session(client, ttl=TTL_S)
    lock = driver.pick(Lock, AsyncLock)(client, "locks/a", session)
    seen: list[ConnectionState] = []
    lock.add_state_listener(seen.append)
    driver.run(lock.acquire(timeout=1))
    driver.run(session.end())
    assert seen == [ConnectionState.ENDED] and lock.connection_state() is ConnectionState.ENDED
    assert not lock.held() and session.expired.is_set()
    driver.run(session.end())  # once more: nothing changes
    assert seen == [ConnectionState.ENDED]
    driver.close(client)
