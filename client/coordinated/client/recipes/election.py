"""`LeaderElection` and `AsyncLeaderElection`: one leader at a time, written once as flows over the lock's.

The leader is the holder of the lock on the election's key, and its token fences its actions; the
guarantees, and what a fencing token does not protect, are the lock's (lock.py).
"""

from __future__ import annotations

from typing import Any, Generic

from coordinated.client import operations
from coordinated.client.aio import AsyncClient, AsyncRecipe, AsyncSession
from coordinated.client.flow import Emit, Flow, Stream, awaiting, awaiting_stream, blocking, blocking_stream
from coordinated.client.recipes import lock
from coordinated.client.recipes.lock import WATCH_TIMEOUT_S, C, LockBase, S
from coordinated.client.sync import BlockingRecipe, Client, Session

Leader = tuple[str, int]  # the leader's identity and its fencing token


class ElectionBase(Generic[C, S]):
    """One leader at a time among the candidates for `name`; the leader's token fences its actions."""

    def __init__(self, client: C, name: str, session: S, identity: str) -> None:
        self.client = client
        self.name = name
        self.identity = identity
        self.lock = LockBase(client, name, session, identity)

    @property
    def token(self) -> int | None:
        return self.lock.token

    def is_leader(self) -> bool:
        """This candidate's belief (see `Lock.held`)."""
        return self.lock.held()


def campaign(election: ElectionBase[Any, Any], timeout: float | None = None) -> Flow[int]:
    """Blocks until this candidate leads; returns its fencing token."""
    return (yield from lock.acquire(election.lock, timeout))


def resign(election: ElectionBase[Any, Any]) -> Flow[None]:
    """Steps down (deletes the key if this candidate still holds it)."""
    yield from lock.release(election.lock)


def leader(election: ElectionBase[Any, Any]) -> Flow[Leader | None]:
    """The current leader's identity and token (a linearizable read), or None."""
    current = yield from lock.read(election.lock)
    if current is None or not isinstance(current.value, dict):
        return None
    return str(current.value.get("data")), current.create_version


def observe(election: ElectionBase[Any, Any], timeout: float = WATCH_TIMEOUT_S) -> Stream[Leader | None]:
    """The leader now, then every change of leader (None while there is none), for ever."""
    client, name = election.client, election.name
    after = (yield from operations.watch_once(client, name, None, timeout=0)).version  # report changes after this
    current = yield from leader(election)
    yield Emit(current)
    while True:
        events, after = yield from operations.next_events(client, name, after, timeout=timeout)
        for event in events:
            if event.key != name and event.type != "reset":
                continue
            now = yield from leader(election)
            if now != current:
                current = now
                yield Emit(current)


class LeaderElection(ElectionBase[Client, Session], BlockingRecipe):
    __doc__ = ElectionBase.__doc__
    campaign = blocking(campaign)
    resign = blocking(resign)
    leader = blocking(leader)
    observe = blocking_stream(observe)


class AsyncLeaderElection(ElectionBase[AsyncClient, AsyncSession], AsyncRecipe):
    __doc__ = ElectionBase.__doc__
    campaign = awaiting(campaign)
    resign = awaiting(resign)
    leader = awaiting(leader)
    observe = awaiting_stream(observe)
