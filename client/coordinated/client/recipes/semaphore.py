"""`Semaphore` and `AsyncSemaphore`: at most `limit` holders at once, first come first served, written once
as flows over turns.py.

A contender holds once fewer than `limit` keys under the prefix are earlier than its own. Since later keys
always get a later `create_version`, a holder's rank never grows, so at any committed state the holders
whose keys exist are at most `limit`. A waiter watches the prefix for the deletion of an earlier key (any
of them frees a slot for it). Every contender must use the same `limit`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coordinated.client.aio import AsyncClient, AsyncRecipe, AsyncSession
from coordinated.client.flow import Flow, awaiting, blocking
from coordinated.client.models import KeyValue
from coordinated.client.recipes import turns
from coordinated.client.recipes.base import C, S
from coordinated.client.recipes.turns import TurnBase
from coordinated.client.sync import BlockingRecipe, Client, Session


class SemaphoreBase(TurnBase[C, S]):
    """At most `limit` holders of `name` at once, through their sessions."""

    def __init__(self, client: C, name: str, session: S, limit: int, data: Any = None) -> None:
        if limit < 1:
            raise ValueError(f"a semaphore's limit must be at least 1, got {limit}")
        super().__init__(client, name, session, data)
        self.limit = limit


def acquire(semaphore: SemaphoreBase[Any, Any], timeout: float | None = None) -> Flow[int]:
    """Blocks until one of the `limit` slots is held (LockTimeout after `timeout` seconds); returns the version
    of the write that marked this holder's key holding. Holders that marked theirs in one committed state share
    it, so it is not unique, and not a fencing token either: `limit` holders act at once."""

    def rule(mine: KeyValue, earlier: Sequence[KeyValue]) -> Sequence[KeyValue]:
        return earlier if len(earlier) >= semaphore.limit else []

    return (yield from turns.take_turn(semaphore, rule, timeout))


def release(semaphore: SemaphoreBase[Any, Any]) -> Flow[None]:
    """Frees this holder's slot; the session lives on."""
    yield from turns.leave(semaphore)


class Semaphore(SemaphoreBase[Client, Session], BlockingRecipe):
    __doc__ = SemaphoreBase.__doc__
    acquire = blocking(acquire)
    release = blocking(release)

    def __enter__(self) -> Semaphore:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class AsyncSemaphore(SemaphoreBase[AsyncClient, AsyncSession], AsyncRecipe):
    __doc__ = SemaphoreBase.__doc__
    acquire = awaiting(acquire)
    release = awaiting(release)

    async def __aenter__(self) -> AsyncSemaphore:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()
