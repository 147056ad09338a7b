"""The shared form of the client: every call and recipe is one flow, bound in both drivers, and both drivers
perform the steps alike (a transport error raised at the flow's `yield`, a stream closed when its caller
stops, an item emitted where a result was expected refused)."""

from __future__ import annotations

import inspect
from collections.abc import Generator
from typing import Any

import httpx
import pytest
from client_drivers import Driver

from coordinated.client import AsyncClient, Client, operations
from coordinated.client.flow import Emit, Flow, NotAStream, Send, Sleep, Stream
from coordinated.client.recipes import barrier, counter, election, group, lock, queue, rwlock, semaphore


def test_both_clients_bind_every_call_of_operations() -> None:
    for name in operations.__all__:
        flow = getattr(operations, name)
        blocking, asynchronous = getattr(Client, name, None), getattr(AsyncClient, name, None)
        assert blocking is not None and asynchronous is not None, f"{name} is missing from a driver"
        assert blocking.__wrapped__ is flow and asynchronous.__wrapped__ is flow, name
        assert blocking.__doc__ == flow.__doc__ == asynchronous.__doc__
        streams = inspect.signature(flow).return_annotation.startswith("Stream")
        assert inspect.iscoroutinefunction(asynchronous) is not streams  # a stream is an async iterator
        assert not inspect.iscoroutinefunction(blocking)


@pytest.mark.parametrize(
    ("module", "blocking", "asynchronous"),
    [
        (lock, lock.Lock, lock.AsyncLock),
        (election, election.LeaderElection, election.AsyncLeaderElection),
        (counter, counter.Counter, counter.AsyncCounter),
        (barrier, barrier.Barrier, barrier.AsyncBarrier),
        (semaphore, semaphore.Semaphore, semaphore.AsyncSemaphore),
        (rwlock, rwlock.ReadWriteLock, rwlock.AsyncReadWriteLock),
        (barrier, barrier.DoubleBarrier, barrier.AsyncDoubleBarrier),
        (queue, queue.Queue, queue.AsyncQueue),
        (group, group.GroupMember, group.AsyncGroupMember),
    ],
)
def test_both_classes_of_a_recipe_bind_the_same_flows(module: Any, blocking: type, asynchronous: type) -> None:
    bound = {name: value.__wrapped__ for name, value in vars(blocking).items() if hasattr(value, "__wrapped__")}
    assert bound, blocking
    assert bound == {
        name: value.__wrapped__ for name, value in vars(asynchronous).items() if hasattr(value, "__wrapped__")
    }
    assert all(getattr(module, flow.__name__) is flow for flow in bound.values())


def fail_then_answer(request: httpx.Request) -> httpx.Response:
    if request.url.path == "/fail":
        raise httpx.ConnectError("refused", request=request)
    return httpx.Response(200, json={"path": request.url.path})


def send(path: str) -> Send:
    return Send("GET", "http://127.0.0.1:1" + path, {}, None, httpx.Timeout(1.0))


def a_flow() -> Flow[list[Any]]:
    seen: list[Any] = []
    try:
        yield send("/fail")
    except httpx.ConnectError as error:  # raised at the yield, as the flow's own exception
        seen.append(type(error).__name__)
    yield Sleep(0.01)
    response = yield send("/ok")
    seen.append(response.json()["path"])
    return seen


def test_a_driver_performs_the_steps_and_returns_the_result(driver: Driver) -> None:
    client = driver.client("127.0.0.1:1", handler=fail_then_answer)
    assert driver.run(client.run_flow(a_flow())) == ["ConnectError", "/ok"]


def test_a_stream_is_closed_when_its_caller_stops(driver: Driver) -> None:
    closed: list[bool] = []

    def counting() -> Stream[int]:
        try:
            number = 0
            while True:
                yield send("/ok")
                number += 1
                yield Emit(number)
        finally:
            closed.append(True)

    client = driver.client("127.0.0.1:1", handler=fail_then_answer)
    stream = client.iterate_flow(counting())
    assert driver.take(stream, 3) == [1, 2, 3]
    driver.run(stream.aclose() if hasattr(stream, "aclose") else _close(stream))
    assert closed == [True]


def _close(stream: Generator[Any, Any, Any]) -> None:
    stream.close()


def test_an_item_where_a_result_is_expected_is_refused(driver: Driver) -> None:
    def emits() -> Flow[None]:
        yield Emit("surprise")  # type: ignore[misc]

    client = driver.client("127.0.0.1:1", handler=fail_then_answer)
    with pytest.raises(NotAStream):
        driver.run(client.run_flow(emits()))
