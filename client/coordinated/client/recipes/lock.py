"""`Lock` and `AsyncLock`: a lock with fencing tokens, written once as flows.

A holder is whoever created the lock key: an ephemeral key of the holder's session, created with
`op_type=create`, so at most one key exists at a time and it disappears, in the same committed state, when
the session ends (expired, ended, or its node left). The fencing token is the key's `create_version`: a
later holder's key was created in a later committed state, so tokens strictly increase from holder to
holder. Waiters watch the key and try again only when it is deleted; they never poll.

What this does NOT give: a holder cannot know at every instant that it still holds the lock. A holder that
pauses (GC, SIGSTOP, a slow disk) past its session's TTL loses the lock while it still believes it holds
it. Only a resource that checks the token (refusing a token lower than the highest it has seen) is safe
from such a holder. See docs/applications.md.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any

from coordinated.client import operations
from coordinated.client.aio import AsyncClient, AsyncRecipe, AsyncSession
from coordinated.client.calls import checked_key
from coordinated.client.errors import (
    LockTimeout,
    NotFound,
    OutcomeUnknown,
    VersionConflict,
)
from coordinated.client.flow import Flow, awaiting, blocking
from coordinated.client.models import KeyValue
from coordinated.client.recipes.base import C, S, SessionRecipe, require_live_session
from coordinated.client.recipes.waiting import deadline_of, wait_for_delete
from coordinated.client.sync import BlockingRecipe, Client, Session


class LockBase(SessionRecipe[C, S]):
    """A lock on key `name`, held through `session`. `acquire` returns the fencing token; pass it with every
    write to the protected resource, which must refuse tokens lower than the highest it has seen."""

    def __init__(self, client: C, name: str, session: S, data: Any = None) -> None:
        super().__init__(client, session)
        self.name = checked_key(name)
        self.key = self.name  # the holder's key
        self.owner = uuid.uuid4().hex  # recognizes our own key after an answer was lost
        self.data = data
        self.token: int | None = None
        self.version = 0  # the holder key's version (a proclaim changes it; the token stays)

    def held(self) -> bool:
        """This client's belief, not the cluster's: True from acquire until release, while the session is
        `connected` (not once it is suspended: no keepalive for a whole TTL, or lost). Only a fencing token
        checked by the resource makes a write safe."""
        return self.token is not None and self.connected()


def holder_value(lock: LockBase[Any, Any]) -> dict[str, Any]:
    return {"owner": lock.owner, "session": lock.session.id, "data": lock.data}


def owned_by(current: KeyValue | None, owner: str) -> bool:
    return current is not None and isinstance(current.value, dict) and current.value.get("owner") == owner


def acquire(lock: LockBase[Any, Any], timeout: float | None = None) -> Flow[int]:
    """Blocks until held (or LockTimeout); returns the fencing token. Raises SessionNotFound if the
    session has ended."""
    deadline = deadline_of(timeout)
    while True:
        require_live_session(lock.session)
        try:
            created = yield from operations.create(lock.client, lock.name, holder_value(lock), session=lock.session.id)
            lock.token = lock.version = created.version
            return created.version
        except (VersionConflict, OutcomeUnknown):
            pass  # held by someone, or perhaps by us: the key says which
        current = yield from read(lock)
        if owned_by(current, lock.owner):
            assert current is not None
            lock.token, lock.version = current.create_version, current.version
            return current.create_version
        if current is None:
            continue
        if deadline is not None and time.monotonic() >= deadline:
            raise LockTimeout(f"lock [{lock.name}] is held by another session")
        yield from wait_for_delete(lock.client, lock.name, current.version, deadline)


def read(lock: LockBase[Any, Any]) -> Flow[KeyValue | None]:
    """The lock key now (a linearizable read), or None."""
    try:
        return (yield from operations.get(lock.client, lock.name))
    except NotFound:
        return None


def release(lock: LockBase[Any, Any]) -> Flow[None]:
    """Deletes the lock key if it is still ours; the session lives on."""
    token, lock.token = lock.token, None
    if token is None:
        return
    # Already gone (the session ended) or being deleted: either way, no longer ours.
    with contextlib.suppress(VersionConflict, NotFound, OutcomeUnknown):
        yield from operations.delete(lock.client, lock.name, if_version=lock.version)


class Lock(LockBase[Client, Session], BlockingRecipe):
    __doc__ = LockBase.__doc__
    acquire = blocking(acquire)
    release = blocking(release)

    def __enter__(self) -> Lock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class AsyncLock(LockBase[AsyncClient, AsyncSession], AsyncRecipe):
    __doc__ = LockBase.__doc__
    acquire = awaiting(acquire)
    release = awaiting(release)

    async def __aenter__(self) -> AsyncLock:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()
