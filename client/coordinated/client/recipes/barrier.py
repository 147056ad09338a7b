"""Barriers, written once as flows.

`Barrier` and `AsyncBarrier`: a gate that holds every waiter until it is lifted (Curator's
`DistributedBarrier`).

The barrier is up while its key exists. `set_barrier()` writes the key (with a session, it is lifted when
that session ends too), `remove_barrier()` deletes it, and `wait()` returns once the key is absent: it
watches the key from the version it read, so it never polls and never misses a removal.

`DoubleBarrier` and `AsyncDoubleBarrier`: `count` participants enter together and leave together (Curator's
`DistributedDoubleBarrier`, ZooKeeper's double barrier). Each participant's key is an ephemeral key of its
session under `name/members/`. `enter()` returns once `name/ready` exists, which a participant writes only
when one listing showed at least `count` members (SessionNotFound if this participant's key went with its
session meanwhile: enter again in a new session); `leave()` deletes its key and returns once no member is
left. A participant whose session ended is no longer counted, but until its TTL runs out after a crash it
still is, as in ZooKeeper. Use a new name for each round.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any, Generic

from coordinated.client import operations
from coordinated.client.aio import AsyncClient, AsyncRecipe, AsyncSession
from coordinated.client.calls import checked_key
from coordinated.client.errors import ChangesGone, LockTimeout, NotFound, SessionNotFound
from coordinated.client.flow import Flow, awaiting, blocking
from coordinated.client.recipes.base import C, S, SessionRecipe, require_live_session
from coordinated.client.recipes.waiting import deadline_of, remaining, wait_for_delete
from coordinated.client.sync import BlockingRecipe, Client, Session


class BarrierBase(Generic[C]):
    """A barrier at key `name`: up while the key exists."""

    def __init__(self, client: C, name: str) -> None:
        self.client = client
        self.name = checked_key(name)


def set_barrier(barrier: BarrierBase[Any], session: str | None = None) -> Flow[None]:
    """Puts the barrier up; with `session` (an id), it comes down by itself when that session ends."""
    yield from operations.put(barrier.client, barrier.name, {"barrier": True}, session=session)


def remove_barrier(barrier: BarrierBase[Any]) -> Flow[None]:
    """Lifts the barrier: every waiter goes on."""
    with contextlib.suppress(NotFound):
        yield from operations.delete(barrier.client, barrier.name)


def wait(barrier: BarrierBase[Any], timeout: float | None = None) -> Flow[None]:
    """Returns once the barrier is down (LockTimeout after `timeout` seconds)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            current = yield from operations.get(barrier.client, barrier.name)
        except NotFound:
            return
        if deadline is not None and remaining(deadline) <= 0:
            raise LockTimeout(f"barrier [{barrier.name}] is still up")
        yield from wait_for_delete(barrier.client, barrier.name, current.version, deadline)


class Barrier(BarrierBase[Client], BlockingRecipe):
    __doc__ = BarrierBase.__doc__
    set_barrier = blocking(set_barrier)
    remove_barrier = blocking(remove_barrier)
    wait = blocking(wait)


class AsyncBarrier(BarrierBase[AsyncClient], AsyncRecipe):
    __doc__ = BarrierBase.__doc__
    set_barrier = awaiting(set_barrier)
    remove_barrier = awaiting(remove_barrier)
    wait = awaiting(wait)


class DoubleBarrierBase(SessionRecipe[C, S]):
    """`count` participants of `name` enter together and leave together, each through its session."""

    def __init__(self, client: C, name: str, session: S, count: int, data: Any = None) -> None:
        if count < 1:
            raise ValueError(f"a double barrier's count must be at least 1, got {count}")
        super().__init__(client, session)
        self.name = checked_key(name)
        self.count = count
        self.members = self.name + "/members/"
        self.ready = self.name + "/ready"
        self.key = checked_key(self.members + uuid.uuid4().hex)
        self.data = data


def _state(barrier: DoubleBarrierBase[Any, Any]) -> Flow[tuple[int, list[str], bool]]:
    """The version read, the members' keys, and whether the barrier is ready: one state."""
    listing = yield from operations.list_prefix(barrier.client, barrier.name + "/", keys_only=True)
    members = [kv.key for kv in listing.keys if kv.key.startswith(barrier.members)]
    return listing.version, members, any(kv.key == barrier.ready for kv in listing.keys)


def _until_changed(barrier: DoubleBarrierBase[Any, Any], after: int, deadline: float | None) -> Flow[None]:
    with contextlib.suppress(ChangesGone):
        yield from operations.watch_once(barrier.client, barrier.name + "/", after, timeout=remaining(deadline))


def enter(barrier: DoubleBarrierBase[Any, Any], timeout: float | None = None) -> Flow[None]:
    """Joins, and returns once `count` participants have joined (LockTimeout after `timeout` seconds: this
    participant then leaves again)."""
    require_live_session(barrier.session)
    deadline = deadline_of(timeout)
    yield from operations.put(barrier.client, barrier.key, {"data": barrier.data}, session=barrier.session.id)
    try:
        while True:
            version, members, ready = yield from _state(barrier)
            if ready:
                return
            if barrier.key not in members:  # gone with our session: we no longer count
                raise SessionNotFound(404, "resource_not_found_exception", f"[{barrier.key}] is gone")
            if len(members) >= barrier.count:
                yield from operations.put(barrier.client, barrier.ready, {"count": len(members)})
                return
            if remaining(deadline) <= 0:
                raise LockTimeout(f"double barrier [{barrier.name}]: {len(members)} of {barrier.count} participants")
            yield from _until_changed(barrier, version, deadline)
    except BaseException:
        with contextlib.suppress(Exception):
            yield from operations.delete(barrier.client, barrier.key)
        raise


def leave(barrier: DoubleBarrierBase[Any, Any], timeout: float | None = None) -> Flow[None]:
    """Leaves, and returns once every participant has left (LockTimeout after `timeout` seconds)."""
    deadline = deadline_of(timeout)
    with contextlib.suppress(NotFound):
        yield from operations.delete(barrier.client, barrier.key)
    while True:
        version, members, _ = yield from _state(barrier)
        if not members:
            return
        if remaining(deadline) <= 0:
            raise LockTimeout(f"double barrier [{barrier.name}]: {len(members)} participants have not left")
        yield from _until_changed(barrier, version, deadline)


class DoubleBarrier(DoubleBarrierBase[Client, Session], BlockingRecipe):
    __doc__ = DoubleBarrierBase.__doc__
    enter = blocking(enter)
    leave = blocking(leave)


class AsyncDoubleBarrier(DoubleBarrierBase[AsyncClient, AsyncSession], AsyncRecipe):
    __doc__ = DoubleBarrierBase.__doc__
    enter = awaiting(enter)
    leave = awaiting(leave)
