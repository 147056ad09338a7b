"""`Lock` and `AsyncLock`: a fair lock with fencing tokens, written once as flows.

Each contender creates its own ephemeral key under `name/` and holds once no earlier key (in
`create_version` order) is left; meanwhile it watches only its immediate predecessor's key, so a release
wakes one waiter and the lock is granted first come, first served (turns.py). The fencing token is the
version of the write with which the new holder marks its key holding: it comes after every earlier holder's
key was deleted, so tokens strictly increase from holder to holder, across master failovers and restarts
too, since versions never go back.

What this does NOT give: a holder cannot know at every instant that it still holds the lock. A holder that
pauses (GC, SIGSTOP, a slow disk) past its session's TTL loses the lock while it still believes it holds
it. Only a resource that checks the token (refusing a token lower than the highest it has seen) is safe
from such a holder. See docs/applications.md.
"""

from __future__ import annotations

from typing import Any

from coordinated.client import operations
from coordinated.client.aio import AsyncClient, AsyncRecipe, AsyncSession
from coordinated.client.errors import NotFound
from coordinated.client.flow import Flow, awaiting, blocking
from coordinated.client.models import KeyValue
from coordinated.client.recipes import turns
from coordinated.client.recipes.base import C, S
from coordinated.client.recipes.turns import TurnBase, contenders, predecessor
from coordinated.client.sync import BlockingRecipe, Client, Session


class LockBase(TurnBase[C, S]):
    """A fair lock named `name`, held through `session`. `acquire` returns the fencing token; pass it with
    every write to the protected resource, which must refuse tokens lower than the highest it has seen."""


def acquire(lock: LockBase[Any, Any], timeout: float | None = None) -> Flow[int]:
    """Blocks until held, first come first served (LockTimeout after `timeout` seconds); returns the fencing
    token. Raises SessionNotFound if the session has ended."""
    return (yield from turns.take_turn(lock, predecessor, timeout))


def release(lock: LockBase[Any, Any]) -> Flow[None]:
    """Deletes this holder's key (the next waiter goes on); the session lives on."""
    yield from turns.leave(lock)


def holder(lock: LockBase[Any, Any]) -> Flow[KeyValue | None]:
    """The holder's key now (a linearizable read: the earliest key under the prefix), or None."""
    _, keys = yield from contenders(lock.client, lock.prefix)
    return keys[0] if keys else None


def read_own(lock: LockBase[Any, Any]) -> Flow[KeyValue | None]:
    try:
        return (yield from operations.get(lock.client, lock.key))
    except NotFound:
        return None


class Lock(LockBase[Client, Session], BlockingRecipe):
    __doc__ = LockBase.__doc__
    acquire = blocking(acquire)
    release = blocking(release)
    holder = blocking(holder)

    def __enter__(self) -> Lock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class AsyncLock(LockBase[AsyncClient, AsyncSession], AsyncRecipe):
    __doc__ = LockBase.__doc__
    acquire = awaiting(acquire)
    release = awaiting(release)
    holder = awaiting(holder)

    async def __aenter__(self) -> AsyncLock:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()
