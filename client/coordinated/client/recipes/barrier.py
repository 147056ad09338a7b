"""`Barrier` and `AsyncBarrier`: a gate that holds every waiter until it is lifted (Curator's
`DistributedBarrier`), written once as flows.

The barrier is up while its key exists. `set_barrier()` writes the key (with a session, it is lifted when
that session ends too), `remove_barrier()` deletes it, and `wait()` returns once the key is absent: it
watches the key from the version it read, so it never polls and never misses a removal.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Generic

from coordinated.client import operations
from coordinated.client.aio import AsyncClient, AsyncRecipe
from coordinated.client.calls import checked_key
from coordinated.client.errors import LockTimeout, NotFound
from coordinated.client.flow import Flow, awaiting, blocking
from coordinated.client.recipes.base import C
from coordinated.client.recipes.waiting import remaining, wait_for_delete
from coordinated.client.sync import BlockingRecipe, Client


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
