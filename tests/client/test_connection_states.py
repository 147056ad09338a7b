"""Connection states of session recipes, against scripted answers, for the blocking and the asyncio client: a
holder cut off from every node stops reporting `held()` once a whole TTL has passed since its last
successful keepalive was sent (`suspended`), comes back when a keepalive succeeds again, and is `lost` once
the cluster says its session ended."""

from __future__ import annotations

import threading
import time

import httpx
from client_drivers import Driver

from coordinated.client import AsyncLock, ConnectionState, Lock

TTL_S = 0.9


class Cluster:
    """Answers a session, a lock and keepalives, until cut off (every request refused) or the session ends."""

    def __init__(self) -> None:
        self.cut_off = threading.Event()
        self.session_gone = threading.Event()
        self.lock_key = ""

    def __call__(self, request: httpx.Request) -> httpx.Response:
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
