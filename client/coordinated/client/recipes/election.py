"""`LeaderElection` and `AsyncLeaderElection`: one leader at a time, written once as flows over the lock's.

The leader is the holder of the fair lock named after the election, and its token fences its actions; the
guarantees, and what a fencing token does not protect, are the lock's (lock.py). Candidates lead in the
order they campaigned. The leader's value is its key's `data`: its identity, until it proclaims another.
"""

from __future__ import annotations

from typing import Any

from coordinated.client import operations
from coordinated.client.aio import AsyncClient, AsyncRecipe, AsyncSession
from coordinated.client.errors import NotLeader, OutcomeUnknown, SessionNotFound, VersionConflict
from coordinated.client.flow import Emit, Flow, Stream, awaiting, awaiting_stream, blocking, blocking_stream
from coordinated.client.recipes import lock as lock_flows
from coordinated.client.recipes.base import C, S, SessionRecipe
from coordinated.client.recipes.lock import LockBase
from coordinated.client.recipes.turns import value_of
from coordinated.client.recipes.waiting import WATCH_TIMEOUT_S
from coordinated.client.sync import BlockingRecipe, Client, Session

Leader = tuple[Any, int]  # the leader's value (its identity, unless it proclaimed another) and its token


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
    """Blocks until this candidate leads (first come, first served); returns its fencing token."""
    return (yield from lock_flows.acquire(election.lock, timeout))


def resign(election: ElectionBase[Any, Any]) -> Flow[None]:
    """Steps down, or leaves the queue of candidates."""
    yield from lock_flows.release(election.lock)


def proclaim(election: ElectionBase[Any, Any], value: Any) -> Flow[int]:
    """The leader sets its value without giving up leadership (its token stays); returns its key's new
    version. Raises NotLeader, writing nothing, if this candidate does not lead (any more)."""
    lock = election.lock
    if lock.token is None:
        raise NotLeader(f"[{election.name}]: this candidate does not lead")
    proclaimed = {**value_of(lock, holding=True), "data": value, "token": lock.token}
    while True:
        try:
            # Only over our own key as we last wrote it: once it is gone (the session ended), this fails.
            written = yield from operations.cas(
                lock.client, lock.key, proclaimed, lock.version, session=lock.session.id
            )
        except (VersionConflict, SessionNotFound) as error:
            lock.token = None
            raise NotLeader(f"[{election.name}]: this candidate no longer leads") from error
        except OutcomeUnknown:
            current = yield from lock_flows.read_own(lock)
            if current is None:
                lock.token = None
                raise NotLeader(f"[{election.name}]: this candidate no longer leads") from None
            lock.version = current.version
            if current.value.get("data") != value:
                continue  # not applied: our key is as it was, so try again
        else:
            lock.version = written.version
        lock.data = value
        return lock.version


def leader(election: ElectionBase[Any, Any]) -> Flow[Leader | None]:
    """The current leader's value and token (a linearizable read), or None."""
    current = yield from lock_flows.holder(election.lock)
    if current is None or not isinstance(current.value, dict) or not current.value.get("holding"):
        return None  # no candidate, or the first has yet to mark its key holding
    # The token is the version of the write that marked the key holding; a proclaim keeps it in the value.
    return current.value.get("data"), int(current.value.get("token", current.version))


def observe(election: ElectionBase[Any, Any], timeout: float = WATCH_TIMEOUT_S) -> Stream[Leader | None]:
    """The leader now, then every change of leader or of its value (None while there is none), for ever."""
    client, prefix = election.client, election.lock.prefix
    after = (yield from operations.watch_once(client, prefix, None, timeout=0)).version  # report changes after this
    current = yield from leader(election)
    yield Emit(current)
    while True:
        events, after = yield from operations.next_events(client, prefix, after, timeout=timeout)
        if not events:
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
