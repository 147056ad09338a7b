"""A TTL session kept alive in the background: its state and its flows, shared by `Session` (a thread keeps
it alive) and `AsyncSession` (a task does).

Its connection state, as Curator names them: `connected` while the session may still be alive on the cluster
by this client's own reckoning, `suspended` once no keepalive has succeeded for a whole TTL (counted from when
the last successful one was sent, so the cluster may have ended the session already), and `lost` once the
cluster has said the session ended. A recipe that holds something through the session stops believing it
holds it when the session is not `connected`.
"""

from __future__ import annotations

import contextlib
import enum
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


class ConnectionState(enum.Enum):
    CONNECTED = "connected"
    SUSPENDED = "suspended"  # no successful keepalive for a whole TTL: the session may have ended
    LOST = "lost"  # the cluster said the session ended; its ephemeral keys are gone


StateListener = Callable[[ConnectionState], None]


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
        self,
        info: SessionInfo,
        ttl: float,
        expired: Flag,
        on_expired: Callable[[], None] | None = None,
        created_at: float | None = None,
    ) -> None:
        self.id = info.id
        self.ttl = ttl
        self.expired = expired
        self.renewed_at = time.monotonic()
        # When the last successful contact was *sent* (the cluster counts the TTL from no earlier than that):
        # the creation request, or else this moment, which is later and so less cautious by one round trip.
        self.contact_sent_at = self.renewed_at if created_at is None else created_at
        self._on_expired = on_expired
        self._listeners: list[StateListener] = []
        self._reported = ConnectionState.CONNECTED

    def state(self) -> ConnectionState:
        """`connected`, `suspended` or `lost`, as of now (see the module's docstring)."""
        if self.expired.is_set():
            return ConnectionState.LOST
        if time.monotonic() - self.contact_sent_at >= self.ttl:
            return ConnectionState.SUSPENDED
        return ConnectionState.CONNECTED

    def add_listener(self, listener: StateListener) -> None:
        """`listener(state)` is called on every change of state, from the keepalive's thread or task: at the
        latest when the keepalive attempt under way ends (`state()` is exact at any time)."""
        self._listeners.append(listener)

    def remove_listener(self, listener: StateListener) -> None:
        with contextlib.suppress(ValueError):
            self._listeners.remove(listener)

    def report_state(self) -> None:
        """Tells the listeners if the state changed since it was last reported."""
        state = self.state()
        if state is self._reported:
            return
        self._reported = state
        for listener in list(self._listeners):
            try:
                listener(state)
            except Exception:  # a listener's failure must not stop the keepalives
                log.exception("a connection state listener of session %s failed", self.id)

    def until_suspended(self) -> float:
        return max(0.0, self.contact_sent_at + self.ttl - time.monotonic())

    def mark_expired(self) -> None:
        self.expired.set()
        if self._on_expired is not None:
            self._on_expired()
        self.report_state()


def keep_alive(client: ClientBase, session: SessionBase) -> Flow[None]:
    """Keepalives until the cluster says the session has ended; a failed one is logged and tried again at
    the next third of the TTL."""
    next_keepalive = time.monotonic() + session.ttl / 3
    while True:
        # Wakes for the next keepalive, or earlier to report the suspension the moment it begins.
        pause = next_keepalive - time.monotonic()
        if session.state() is ConnectionState.CONNECTED:
            pause = min(pause, session.until_suspended())
        yield Sleep(max(0.0, pause))
        session.report_state()
        if time.monotonic() < next_keepalive:
            continue
        sent_at = time.monotonic()
        try:
            yield from operations.keepalive(client, session.id)
            session.renewed_at = time.monotonic()
            session.contact_sent_at = sent_at
        except SessionNotFound:
            session.mark_expired()
            return
        except CoordinatedError as error:
            log.warning("keepalive of session %s failed: %s", session.id, error)
        session.report_state()
        next_keepalive = time.monotonic() + session.ttl / 3


def end(client: ClientBase, session: SessionBase) -> Flow[None]:
    """Ends the session (its ephemeral keys go with it), unless the cluster has ended it already."""
    if not session.expired.is_set():
        with contextlib.suppress(SessionNotFound):
            yield from operations.end_session(client, session.id)
        session.expired.set()
        session.report_state()
