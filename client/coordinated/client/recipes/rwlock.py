"""`ReadWriteLock` and `AsyncReadWriteLock`: readers share, a writer holds alone, first come first served;
written once as flows over turns.py (ZooKeeper's shared-lock recipe).

A reader holds once no writer's key is earlier than its own, and waits for the latest earlier writer's key to
go. A writer holds once no key at all is earlier than its own, and waits for its immediate predecessor. A
writer queued behind readers is not overtaken by readers that come after it. A writer's token is a fencing
token, as the lock's; a reader's is its key's create_version.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coordinated.client.aio import AsyncClient, AsyncRecipe, AsyncSession
from coordinated.client.flow import Flow, awaiting, blocking
from coordinated.client.models import KeyValue
from coordinated.client.recipes import turns
from coordinated.client.recipes.base import C, S
from coordinated.client.recipes.turns import TurnBase, predecessor
from coordinated.client.sync import BlockingRecipe, Client, Session

READ, WRITE = "read", "write"


class ReadWriteLockBase(TurnBase[C, S]):
    """One side of a read/write lock named `name`: `mode` is `"read"` (shared) or `"write"` (exclusive)."""

    def __init__(self, client: C, name: str, session: S, mode: str, data: Any = None) -> None:
        if mode not in (READ, WRITE):
            raise ValueError(f"a read/write lock's mode is 'read' or 'write', got {mode!r}")
        super().__init__(client, name, session, data, kind=mode)


def earlier_writer(mine: KeyValue, earlier: Sequence[KeyValue]) -> Sequence[KeyValue]:
    writers = [kv for kv in earlier if isinstance(kv.value, dict) and kv.value.get("kind") == WRITE]
    return writers[-1:]


def acquire(lock: ReadWriteLockBase[Any, Any], timeout: float | None = None) -> Flow[int]:
    """Blocks until held in this lock's mode (LockTimeout after `timeout` seconds); returns the token."""
    return (yield from turns.take_turn(lock, predecessor if lock.kind == WRITE else earlier_writer, timeout))


def release(lock: ReadWriteLockBase[Any, Any]) -> Flow[None]:
    yield from turns.leave(lock)


class ReadWriteLock(ReadWriteLockBase[Client, Session], BlockingRecipe):
    __doc__ = ReadWriteLockBase.__doc__
    acquire = blocking(acquire)
    release = blocking(release)

    def __enter__(self) -> ReadWriteLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class AsyncReadWriteLock(ReadWriteLockBase[AsyncClient, AsyncSession], AsyncRecipe):
    __doc__ = ReadWriteLockBase.__doc__
    acquire = awaiting(acquire)
    release = awaiting(release)

    async def __aenter__(self) -> AsyncReadWriteLock:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()
