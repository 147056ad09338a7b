"""The recipes on one shared three-node cluster, with the blocking and the asyncio client alike: the fair
lock's first-come-first-served order, the semaphore's limit, the read/write lock's sharing, proclaim, the
counter, the double barrier, the queue and group membership."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from client_drivers import Driver

from coordinated.client import (
    AsyncCounter,
    AsyncDoubleBarrier,
    AsyncGroupMember,
    AsyncLeaderElection,
    AsyncLock,
    AsyncQueue,
    AsyncReadWriteLock,
    AsyncSemaphore,
    ClaimLost,
    Counter,
    DoubleBarrier,
    GroupMember,
    LeaderElection,
    Lock,
    LockTimeout,
    NotLeader,
    Queue,
    ReadWriteLock,
    Semaphore,
)
from coordinated.tools.localcluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    cluster = LocalCluster(Path(tmp_path_factory.mktemp("recipes")))
    try:
        yield [node.url for node in cluster.bootstrap(3)]
    finally:
        cluster.stop_all(graceful=False)


def fresh(name: str) -> str:
    """A name of its own per test run: the tests share the cluster."""
    return f"{name}-{uuid.uuid4().hex[:8]}"


def test_the_lock_is_granted_first_come_first_served(driver: Driver, urls: list[str]) -> None:
    client = driver.client(urls)
    session = driver.session(client, ttl=5.0)
    lock_class, name = driver.pick(Lock, AsyncLock), fresh("locks/fifo")
    first = lock_class(client, name, session, data="first")
    driver.run(first.acquire(timeout=5))
    order: list[str] = []
    waiters = []
    for label in ["a", "b", "c"]:
        waiter = lock_class(client, name, session, data=label)

        def take(waiter: Any = waiter, label: str = label) -> Any:
            if driver.loop is None:
                token = waiter.acquire(timeout=30)
                order.append(label)
                return token

            async def in_order() -> int:
                token: int = await waiter.acquire(timeout=30)
                order.append(label)
                return token

            return in_order()

        waiters.append((waiter, driver.start(take)))
        driver.sleep(0.4)  # each waiter's key is created before the next one's
    tokens = [driver.run(first.release())]
    for waiter, background in waiters:
        tokens.append(driver.result(background, 20))
        assert waiter.held()
        driver.run(waiter.release())
    assert order == ["a", "b", "c"]
    assert tokens[1:] == sorted(tokens[1:])
    # A waiter that gives up leaves the queue: the next one is not blocked by it.
    driver.run(first.acquire(timeout=5))
    with pytest.raises(LockTimeout):
        driver.run(lock_class(client, name, session).acquire(timeout=0.3))
    assert driver.run(first.holder()).key == first.key
    driver.run(first.release())
    driver.run(session.end())
    driver.close(client)


def test_semaphore_and_read_write_lock(driver: Driver, urls: list[str]) -> None:
    client = driver.client(urls)
    session = driver.session(client, ttl=5.0)
    semaphore_class, name = driver.pick(Semaphore, AsyncSemaphore), fresh("slots/x")
    held = [semaphore_class(client, name, session, 2) for _ in range(3)]
    driver.run(held[0].acquire(timeout=5))
    driver.run(held[1].acquire(timeout=5))
    with pytest.raises(LockTimeout):
        driver.run(held[2].acquire(timeout=0.3))  # two slots, both taken
    driver.run(held[0].release())
    driver.run(held[2].acquire(timeout=5))
    rw_class, rw = driver.pick(ReadWriteLock, AsyncReadWriteLock), fresh("rw/x")
    reader_a, reader_b = rw_class(client, rw, session, "read"), rw_class(client, rw, session, "read")
    writer, late_reader = rw_class(client, rw, session, "write"), rw_class(client, rw, session, "read")
    driver.run(reader_a.acquire(timeout=5))
    driver.run(reader_b.acquire(timeout=5))  # readers share
    with pytest.raises(LockTimeout):
        driver.run(writer.acquire(timeout=0.3))  # a writer waits for the readers
    waiting_writer = driver.start(lambda: writer.acquire(timeout=20))
    driver.sleep(0.3)
    with pytest.raises(LockTimeout):
        driver.run(late_reader.acquire(timeout=0.3))  # a reader after a queued writer waits for it
    driver.run(reader_a.release())
    driver.run(reader_b.release())
    driver.result(waiting_writer, 20)
    assert writer.held()
    driver.run(writer.release())
    driver.run(late_reader.acquire(timeout=5))
    driver.run(session.end())
    driver.close(client)


def test_proclaim_keeps_leadership_and_is_refused_once_not_leader(driver: Driver, urls: list[str]) -> None:
    client = driver.client(urls)
    election_class, name = driver.pick(LeaderElection, AsyncLeaderElection), fresh("leaders/p")
    session_a, session_b = driver.session(client, ttl=5.0), driver.session(client, ttl=5.0)
    a, b = election_class(client, name, session_a, "pod-a"), election_class(client, name, session_b, "pod-b")
    with pytest.raises(NotLeader):
        driver.run(a.proclaim("too early"))
    token = driver.run(a.campaign(timeout=5))
    driver.run(a.proclaim({"address": "10.0.0.1"}))
    assert driver.run(b.leader()) == ({"address": "10.0.0.1"}, token) and a.is_leader()
    driver.run(session_a.end())  # a's key goes with its session: b leads
    assert driver.run(b.campaign(timeout=5)) > token
    with pytest.raises(NotLeader):
        driver.run(a.proclaim("stale"))
    assert driver.run(b.leader())[0] == "pod-b"
    driver.run(session_b.end())
    driver.close(client)


def test_counter_double_barrier_queue_and_group(driver: Driver, urls: list[str]) -> None:
    client = driver.client(urls)
    session = driver.session(client, ttl=5.0)
    counter = driver.pick(Counter, AsyncCounter)(client, fresh("counters/c"))
    assert driver.run(counter.get()) == 0
    assert [driver.run(counter.add(2)), driver.run(counter.add(-1))] == [2, 1]

    barrier_class, gate = driver.pick(DoubleBarrier, AsyncDoubleBarrier), fresh("barriers/b")
    one, two = barrier_class(client, gate, session, 2), barrier_class(client, gate, session, 2)
    with pytest.raises(LockTimeout):
        driver.run(one.enter(timeout=0.3))  # alone of two: not released
    entering = driver.start(lambda: one.enter(timeout=20))
    driver.sleep(0.3)
    assert not entering.done()
    driver.run(two.enter(timeout=5))
    driver.result(entering, 20)
    leaving = driver.start(lambda: one.leave(timeout=20))
    driver.sleep(0.3)
    assert not leaving.done()  # two has not left yet
    driver.run(two.leave(timeout=5))
    driver.result(leaving, 20)

    queue_class, name = driver.pick(Queue, AsyncQueue), fresh("queues/q")
    producer, consumer = queue_class(client, name), queue_class(client, name, session)
    for value in ["a", "b", "c"]:
        driver.run(producer.put(value))
    first = driver.run(consumer.take(timeout=5))
    second = driver.run(consumer.take(timeout=5))  # the first is claimed: the next one
    assert (first.value, second.value) == ("a", "b")
    driver.run(consumer.release(first))  # given back: taken again, first in line
    again = driver.run(consumer.take(timeout=5))
    assert again.value == "a"
    driver.run(consumer.ack(again))
    with pytest.raises(ClaimLost):
        driver.run(consumer.ack(again))
    driver.run(consumer.ack(second))
    assert driver.run(consumer.size()) == 1

    member_class, group = driver.pick(GroupMember, AsyncGroupMember), fresh("groups/g")
    other_session = driver.session(client, ttl=5.0)
    me, other = member_class(client, group, session, "me", 1), member_class(client, group, other_session, "other", 2)
    driver.run(me.join())
    saw_other: list[bool] = []

    def back_to_me_alone(view: Any) -> bool:
        if "other" in view:
            saw_other.append(True)
        return bool(saw_other) and view == {"me": 1}

    views = driver.start(lambda: driver.take_until(me.watch_members(), back_to_me_alone))
    driver.sleep(0.5)
    driver.run(other.join())
    driver.run(other_session.end())  # its key goes with its session
    views_seen = driver.result(views, 20)
    assert views_seen[0] == {"me": 1} and {"me": 1, "other": 2} in views_seen and views_seen[-1] == {"me": 1}
    assert driver.run(me.members()) == {"me": 1}
    driver.run(session.end())
    driver.close(client)
