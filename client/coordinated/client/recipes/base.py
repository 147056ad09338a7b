"""What every recipe that holds something through a session shares: its client and session, and the
session's connection state (`connected`, `suspended`, `lost`; see sessions.py) with its listeners."""

from __future__ import annotations

from typing import Generic, TypeVar

from coordinated.client.base import ClientBase
from coordinated.client.errors import SessionNotFound
from coordinated.client.sessions import ConnectionState, SessionBase, StateListener

C = TypeVar("C", bound=ClientBase)
S = TypeVar("S", bound=SessionBase)


class SessionRecipe(Generic[C, S]):
    def __init__(self, client: C, session: S) -> None:
        self.client = client
        self.session = session

    def connection_state(self) -> ConnectionState:
        """`connected`, `suspended` (no successful keepalive for a whole TTL: act as if not holding) or `lost`
        (the session has ended, and whatever it held is gone)."""
        return self.session.state()

    def add_state_listener(self, listener: StateListener) -> None:
        """`listener(state)` on every change of the session's connection state (see `SessionBase.add_listener`)."""
        self.session.add_listener(listener)

    def connected(self) -> bool:
        return self.session.state() is ConnectionState.CONNECTED


def require_live_session(session: SessionBase) -> None:
    if session.expired.is_set():
        raise SessionNotFound(404, "resource_not_found_exception", f"session [{session.id}] has ended")
