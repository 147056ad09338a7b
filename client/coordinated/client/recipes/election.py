"""`LeaderElection` and `AsyncLeaderElection`: one leader at a time, written once as flows over the lock's.

The leader is the holder of the lock on the election's key, and its token fences its actions; the
guarantees, and what a fencing token does not protect, are the lock's (lock.py).
"""

from __future__ import annotations

from typing import Any

from coordinated.client import operations
from coordinated.client.aio import AsyncClient, AsyncRecipe, AsyncSession
from coordinated.client.errors import NotLeader, OutcomeUnknown, SessionNotFound, VersionConflict
from coordinated.client.flow import Emit, Flow, Stream, awaiting, awaiting_stream, blocking, blocking_stream
from coordinated.client.recipes import lock as lock_flows
from coordinated.client.recipes.base import C, S, SessionRecipe
from coordinated.client.recipes.lock import LockBase, holder_value, owned_by
from coordinated.client.recipes.waiting import WATCH_TIMEOUT_S
from coordinated.client.sync import BlockingRecipe, Client, Session

Leader = tuple[str, int]  # the leader's identity and its fencing token


class ElectionBase(SessionRecipe[C, S]):
    """One leader at a time among the candidates for `name`; the leader's token fences its actions. The
    leader's value (its identity at first) is what `leader()` reports; `proclaim` changes it."""

    def __init__(self, client: C, name: str, session: S, identity: Any) -> None:
        super().__init__(client, session)
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
    return (yield from lock_flows.acquire(election.lock, timeout))


def resign(election: ElectionBase[Any, Any]) -> Flow[None]:
    """Steps down (deletes the key if this candidate still holds it)."""
    yield from lock_flows.release(election.lock)


def proclaim(election: ElectionBase[Any, Any], value: Any) -> Flow[int]:
    """The leader sets its value without giving up leadership (its token stays); returns the key's new
    version. Raises NotLeader, writing nothing, if this candidate does not lead (any more)."""
    lock = election.lock
    if lock.token is None:
        raise NotLeader(f"[{election.name}]: this candidate does not lead")
    proclaimed = {**holder_value(lock), "data": value}
    try:
        # Only over our own key instance: a successor's key, or none, fails the version compare.
        written = yield from operations.cas(lock.client, lock.name, proclaimed, lock.version, session=lock.session.id)
    except (VersionConflict, SessionNotFound) as error:
        lock.token = None
        raise NotLeader(f"[{election.name}]: this candidate no longer leads") from error
    except OutcomeUnknown:
        current = yield from lock_flows.read(lock)
        if not owned_by(current, lock.owner) or current is None or current.create_version != lock.token:
            lock.token = None
            raise NotLeader(f"[{election.name}]: this candidate no longer leads") from None
        if current.value.get("data") != value:
            lock.version = current.version
            return (yield from proclaim(election, value))  # not applied: our key is unchanged, try again
        written_version = current.version
    else:
        written_version = written.version
    lock.version, lock.data = written_version, value
    return written_version


def leader(election: ElectionBase[Any, Any]) -> Flow[Leader | None]:
    """The current leader's identity and token (a linearizable read), or None."""
    current = yield from lock_flows.read(election.lock)
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
    proclaim = blocking(proclaim)
    resign = blocking(resign)
    leader = blocking(leader)
    observe = blocking_stream(observe)


class AsyncLeaderElection(ElectionBase[AsyncClient, AsyncSession], AsyncRecipe):
    __doc__ = ElectionBase.__doc__
    campaign = awaiting(campaign)
    proclaim = awaiting(proclaim)
    resign = awaiting(resign)
    leader = awaiting(leader)
    observe = awaiting_stream(observe)
