"""A TTL session kept alive in the background: its state and its flows, shared by `Session` (threads keep
it alive and watch its clock) and `AsyncSession` (tasks do).

Its connection state, as Curator names them:

- `connected` while the session is alive on the cluster by this client's own clock;
- `suspended` once no keepalive has succeeded for the TTL less the safety margin, counted from when the last
  successful one was *sent*. The cluster counts the TTL from when a keepalive *arrived* at its master, which is
  later, so by then the cluster may be about to end the session: the margin (a tenth of the TTL by default)
  covers the drift between the two clocks and a late wake-up of this process. A keepalive that succeeds
  again brings the session back to `connected`;
- `lost` once the cluster said the session ended (a keepalive answered 404): whatever it held is gone;
- `ended` once this client ended it on purpose (`end()`), which is not a loss.

A recipe that holds something through the session stops believing it holds it when the session is not
`connected`. The clock is watched on its own (`watch_clock`), apart from the keepalives: a keepalive that
hangs (its node stopped, a partition) never delays the change to `suspended` or its listeners.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from coordinated.client import operations
from coordinated.client.base import ClientBase
from coordinated.client.errors import CoordinatedError, SessionNotFound
from coordinated.client.flow import Flow, Sleep
from coordinated.client.models import SessionInfo

log = logging.getLogger("coordinated.client")

# The safety margin's default, as a share of the TTL: a session is `suspended` once no keepalive has
# succeeded for nine tenths of its TTL (9 s of a 10 s TTL).
SAFETY_MARGIN_SHARE = 0.1


class ConnectionState(enum.Enum):
    CONNECTED = "connected"
    SUSPENDED = "suspended"  # no successful keepalive for the TTL less the margin: the session may be ending
    LOST = "lost"  # the cluster said the session ended; its ephemeral keys are gone
    ENDED = "ended"  # this client ended the session on purpose (`end()`); its ephemeral keys are gone


StateListener = Callable[[ConnectionState], None]


class Flag(Protocol):
    """What a session needs of its `expired` event: `threading.Event` and `asyncio.Event` both have it."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...


def safety_margin_of(ttl: float, margin: float | None) -> float:
    """The margin given (default: a tenth of the TTL), or ValueError unless it is at least 0 and below the TTL."""
    margin = ttl * SAFETY_MARGIN_SHARE if margin is None else margin
    if not 0 <= margin < ttl:
        raise ValueError(f"a session's safety margin must be at least 0 and less than its TTL ({ttl} s), got {margin}")
    return margin


class SessionBase:
    """A TTL session that the client keeps alive with a keepalive every third of the TTL.

    `expired` is set once the session is over: the cluster said it ended (`lost`), or this client ended it
    (`ended`). Until then the session may still have ended: the cluster decides, on the master's clock, and
    this client stops counting on it at `ttl - safety_margin` after the last successful keepalive was sent
    (`suspended`). See docs/applications.md on what that means for locks.
    """

    def __init__(
        self,
        info: SessionInfo,
        ttl: float,
        expired: Flag,
        on_expired: Callable[[], None] | None = None,
        created_at: float | None = None,
        safety_margin: float | None = None,
    ) -> None:
        margin = safety_margin_of(ttl, safety_margin)
        self.id = info.id
        self.ttl = ttl
        self.safety_margin = margin
        self.expired = expired
        self.ended = False  # ended on purpose, by `end()`
        self.renewed_at = time.monotonic()
        # When the last successful contact was *sent* (the cluster counts the TTL from no earlier than that):
        # the creation request, or else this moment, which is later and so less cautious by one round trip.
        self.contact_sent_at = self.renewed_at if created_at is None else created_at
        self._on_expired = on_expired
        self._listeners: list[StateListener] = []
        self._reported = ConnectionState.CONNECTED
        self._reporting = threading.Lock()  # the keepalive and the clock report from two threads (or tasks)

    @property
    def lifetime(self) -> float:
        """How long after a successful keepalive was sent this client counts on the session: TTL less margin."""
        return self.ttl - self.safety_margin

    def state(self) -> ConnectionState:
        """`connected`, `suspended`, `lost` or `ended`, as of now (see the module's docstring)."""
        if self.expired.is_set():
            return ConnectionState.ENDED if self.ended else ConnectionState.LOST
        if time.monotonic() - self.contact_sent_at >= self.lifetime:
            return ConnectionState.SUSPENDED
        return ConnectionState.CONNECTED

    def add_listener(self, listener: StateListener) -> None:
        """`listener(state)` is called on every change of state, from the session's own thread or task: a
        suspension at once, by this client's clock, even while a keepalive hangs."""
        self._listeners.append(listener)

    def remove_listener(self, listener: StateListener) -> None:
        with contextlib.suppress(ValueError):
            self._listeners.remove(listener)

    def report_state(self) -> None:
        """Tells the listeners if the state changed since it was last reported."""
        with self._reporting:
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
        """Seconds until this client stops counting on the session (0: suspended, or over, already)."""
        return max(0.0, self.contact_sent_at + self.lifetime - time.monotonic())

    def renewed(self, sent_at: float) -> None:
        """A keepalive sent at `sent_at` (monotonic) succeeded."""
        self.renewed_at = time.monotonic()
        self.contact_sent_at = max(self.contact_sent_at, sent_at)

    def mark_expired(self) -> None:
        """The cluster said the session has ended: `lost` (unless it was over already)."""
        if self.expired.is_set():
            return
        self.expired.set()
        if self._on_expired is not None:
            self._on_expired()
        self.report_state()

    def mark_ended(self) -> None:
        """This client ended the session: `ended`, unless it was `lost` already."""
        if not self.expired.is_set():
            self.ended = True
            self.expired.set()
        self.report_state()


def keep_alive(client: ClientBase, session: SessionBase) -> Flow[None]:
    """Keepalives every third of the TTL until the cluster says the session has ended; a failed one is
    logged and tried again at the next third."""
    while not session.expired.is_set():
        yield Sleep(session.ttl / 3)
        if session.expired.is_set():
            return
        sent_at = time.monotonic()
        try:
            yield from operations.keepalive(client, session.id)
            session.renewed(sent_at)
        except SessionNotFound:
            session.mark_expired()
            return
        except CoordinatedError as error:
            log.warning("keepalive of session %s failed: %s", session.id, error)
        session.report_state()


def watch_clock(session: SessionBase) -> Flow[None]:
    """Reports the change to `suspended` the moment this client's clock says it (a keepalive under way may
    hang for its whole request timeout); while suspended, it looks again every tenth of the TTL."""
    while not session.expired.is_set():
        pause = session.until_suspended()
        yield Sleep(pause if pause > 0 else session.ttl / 10)
        session.report_state()


def end(client: ClientBase, session: SessionBase) -> Flow[None]:
    """Ends the session (its ephemeral keys go with it), unless it is over already: `ended`."""
    if not session.expired.is_set():
        with contextlib.suppress(SessionNotFound):
            yield from operations.end_session(client, session.id)
    session.mark_ended()
