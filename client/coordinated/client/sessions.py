"""A TTL session kept alive in the background: its state and its flows, shared by `Session` (a thread keeps
it alive) and `AsyncSession` (a task does)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Protocol

from coordinated.client import operations
from coordinated.client.base import ClientBase
from coordinated.client.errors import CoordinatedError, SessionNotFound
from coordinated.client.flow import Flow, Sleep
from coordinated.client.models import SessionInfo

log = logging.getLogger("coordinated.client")


class Flag(Protocol):
    """What a session needs of its `expired` event: `threading.Event` and `asyncio.Event` both have it."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...


class SessionBase:
    """A TTL session that the client keeps alive with a keepalive every third of the TTL.

    `expired` is set once the cluster has said the session ended. Until then the session may still have
    ended: the cluster decides, on the master's clock. See docs/applications.md on what that means for locks.
    """

    def __init__(
        self, info: SessionInfo, ttl: float, expired: Flag, on_expired: Callable[[], None] | None = None
    ) -> None:
        self.id = info.id
        self.ttl = ttl
        self.expired = expired
        self.renewed_at = time.monotonic()
        self._on_expired = on_expired

    def mark_expired(self) -> None:
        self.expired.set()
        if self._on_expired is not None:
            self._on_expired()


def keep_alive(client: ClientBase, session: SessionBase) -> Flow[None]:
    """Keepalives until the cluster says the session has ended; a failed one is logged and tried again at
    the next third of the TTL."""
    while True:
        yield Sleep(session.ttl / 3)
        try:
            yield from operations.keepalive(client, session.id)
            session.renewed_at = time.monotonic()
        except SessionNotFound:
            session.mark_expired()
            return
        except CoordinatedError as error:
            log.warning("keepalive of session %s failed: %s", session.id, error)


def end(client: ClientBase, session: SessionBase) -> Flow[None]:
    """Ends the session (its ephemeral keys go with it), unless the cluster has ended it already."""
    if not session.expired.is_set():
        with contextlib.suppress(SessionNotFound):
            yield from operations.end_session(client, session.id)
        session.expired.set()
