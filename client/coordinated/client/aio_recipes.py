"""`AsyncLock` and `AsyncLeaderElection`: the recipes of `recipes.py` for the asyncio client.

The guarantees, and what a fencing token does not protect, are those of `recipes.py`.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from coordinated.client.aio import AsyncClient, AsyncSession
from coordinated.client.errors import (
    ChangesGone,
    NotFound,
    OutcomeUnknown,
    SessionNotFound,
    VersionConflict,
)
from coordinated.client.models import KeyValue
from coordinated.client.recipes import WATCH_TIMEOUT_S, LockTimeout, holder_value, owned_by


def _remaining(deadline: float | None) -> float:
    return WATCH_TIMEOUT_S if deadline is None else max(0.0, min(WATCH_TIMEOUT_S, deadline - time.monotonic()))


class AsyncLock:
    """A lock on key `name`, held through `session`. `acquire` returns the fencing token; pass it with every
    write to the protected resource, which must refuse tokens lower than the highest it has seen."""

    def __init__(self, client: AsyncClient, name: str, session: AsyncSession, data: Any = None) -> None:
        self.client = client
        self.name = name
        self.session = session
        self.owner = uuid.uuid4().hex  # recognizes our own key after an answer was lost
        self.data = data
        self.token: int | None = None

    async def acquire(self, timeout: float | None = None) -> int:
        """Blocks until held (or LockTimeout); returns the fencing token. Raises SessionNotFound if the
        session has ended."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.session.expired.is_set():
                raise SessionNotFound(404, "resource_not_found_exception", f"session [{self.session.id}] has ended")
            try:
                created = await self.client.create(
                    self.name, holder_value(self.owner, self.session.id, self.data), session=self.session.id
                )
                self.token = created.version
                return created.version
            except (VersionConflict, OutcomeUnknown):
                pass  # held by someone, or perhaps by us: the key says which
            current = await self._read()
            if owned_by(current, self.owner):
                assert current is not None
                self.token = current.create_version
                return current.create_version
            if current is None:
                continue
            if deadline is not None and time.monotonic() >= deadline:
                raise LockTimeout(f"lock [{self.name}] is held by another session")
            await self._wait_for_delete(current.version, deadline)

    async def _read(self) -> KeyValue | None:
        try:
            return await self.client.get(self.name)
        except NotFound:
            return None

    async def _wait_for_delete(self, after: int, deadline: float | None) -> None:
        """Returns when the key is deleted (or may have been), or at the deadline."""
        while _remaining(deadline) > 0:
            try:
                batch = await self.client.watch_once(self.name, after, timeout=_remaining(deadline))
            except ChangesGone:
                return
            if any(event.key == self.name and event.type == "delete" for event in batch.events):
                return
            after = batch.version

    async def release(self) -> None:
        """Deletes the lock key if it is still ours; the session lives on."""
        token, self.token = self.token, None
        if token is None:
            return
        # Already gone (the session ended) or being deleted: either way, no longer ours.
        with contextlib.suppress(VersionConflict, NotFound, OutcomeUnknown):
            await self.client.delete(self.name, if_version=token)

    def held(self) -> bool:
        """This client's belief, not the cluster's: True from acquire until release or until the cluster has
        said the session ended. Only a fencing token checked by the resource makes a write safe."""
        return self.token is not None and not self.session.expired.is_set()

    async def __aenter__(self) -> AsyncLock:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()


class AsyncLeaderElection:
    """One leader at a time among the candidates for `name`; the leader's token fences its actions."""

    def __init__(self, client: AsyncClient, name: str, session: AsyncSession, identity: str) -> None:
        self.client = client
        self.name = name
        self.identity = identity
        self._lock = AsyncLock(client, name, session, identity)

    async def campaign(self, timeout: float | None = None) -> int:
        """Blocks until this candidate leads; returns its fencing token."""
        return await self._lock.acquire(timeout)

    async def resign(self) -> None:
        await self._lock.release()

    @property
    def token(self) -> int | None:
        return self._lock.token

    def is_leader(self) -> bool:
        """This candidate's belief (see `AsyncLock.held`)."""
        return self._lock.held()

    async def leader(self) -> tuple[str, int] | None:
        """The current leader's identity and token (a linearizable read), or None."""
        current = await self._lock._read()
        if current is None or not isinstance(current.value, dict):
            return None
        return str(current.value.get("data")), current.create_version

    async def observe(self, timeout: float = WATCH_TIMEOUT_S) -> AsyncIterator[tuple[str, int] | None]:
        """The leader now, then every change of leader (None while there is none), for ever."""
        start = (await self.client.watch_once(self.name, None, timeout=0)).version  # changes after this are reported
        current = await self.leader()
        yield current
        async for event in self.client.watch(self.name, start, timeout=timeout):
            if event.key != self.name and event.type != "reset":
                continue
            now = await self.leader()
            if now != current:
                current = now
                yield current
