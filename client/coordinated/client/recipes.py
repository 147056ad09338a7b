"""`Lock` and `LeaderElection` with fencing tokens, for the blocking client.

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
from collections.abc import Iterator
from typing import Any

from coordinated.client.errors import (
    ChangesGone,
    CoordinatedError,
    NotFound,
    OutcomeUnknown,
    SessionNotFound,
    VersionConflict,
)
from coordinated.client.models import KeyValue
from coordinated.client.sync import Client, Session

WATCH_TIMEOUT_S = 30.0


class LockTimeout(CoordinatedError):
    """The lock was not acquired within the timeout."""


def _remaining(deadline: float | None) -> float:
    return WATCH_TIMEOUT_S if deadline is None else max(0.0, min(WATCH_TIMEOUT_S, deadline - time.monotonic()))


def holder_value(owner: str, session: str, data: Any) -> dict[str, Any]:
    return {"owner": owner, "session": session, "data": data}


def owned_by(current: KeyValue | None, owner: str) -> bool:
    return current is not None and isinstance(current.value, dict) and current.value.get("owner") == owner


class Lock:
    """A lock on key `name`, held through `session`. `acquire` returns the fencing token; pass it with every
    write to the protected resource, which must refuse tokens lower than the highest it has seen."""

    def __init__(self, client: Client, name: str, session: Session, data: Any = None) -> None:
        self.client = client
        self.name = name
        self.session = session
        self.owner = uuid.uuid4().hex  # recognizes our own key after an answer was lost
        self.data = data
        self.token: int | None = None

    def acquire(self, timeout: float | None = None) -> int:
        """Blocks until held (or LockTimeout); returns the fencing token. Raises SessionNotFound if the
        session has ended."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.session.expired.is_set():
                raise SessionNotFound(404, "resource_not_found_exception", f"session [{self.session.id}] has ended")
            try:
                created = self.client.create(
                    self.name, holder_value(self.owner, self.session.id, self.data), session=self.session.id
                )
                self.token = created.version
                return created.version
            except (VersionConflict, OutcomeUnknown):
                pass  # held by someone, or perhaps by us: the key says which
            current = self._read()
            if owned_by(current, self.owner):
                assert current is not None
                self.token = current.create_version
                return current.create_version
            if current is None:
                continue
            if deadline is not None and time.monotonic() >= deadline:
                raise LockTimeout(f"lock [{self.name}] is held by another session")
            self._wait_for_delete(current.version, deadline)

    def _read(self) -> KeyValue | None:
        try:
            return self.client.get(self.name)
        except NotFound:
            return None

    def _wait_for_delete(self, after: int, deadline: float | None) -> None:
        """Returns when the key is deleted (or may have been), or at the deadline."""
        while _remaining(deadline) > 0:
            try:
                batch = self.client.watch_once(self.name, after, timeout=_remaining(deadline))
            except ChangesGone:
                return
            if any(event.key == self.name and event.type == "delete" for event in batch.events):
                return
            after = batch.version

    def release(self) -> None:
        """Deletes the lock key if it is still ours; the session lives on."""
        token, self.token = self.token, None
        if token is None:
            return
        # Already gone (the session ended) or being deleted: either way, no longer ours.
        with contextlib.suppress(VersionConflict, NotFound, OutcomeUnknown):
            self.client.delete(self.name, if_version=token)

    def held(self) -> bool:
        """This client's belief, not the cluster's: True from acquire until release or until the cluster has
        said the session ended. Only a fencing token checked by the resource makes a write safe."""
        return self.token is not None and not self.session.expired.is_set()

    def __enter__(self) -> Lock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class LeaderElection:
    """One leader at a time among the candidates for `name`; the leader's token fences its actions."""

    def __init__(self, client: Client, name: str, session: Session, identity: str) -> None:
        self.client = client
        self.name = name
        self.identity = identity
        self._lock = Lock(client, name, session, identity)

    def campaign(self, timeout: float | None = None) -> int:
        """Blocks until this candidate leads; returns its fencing token."""
        return self._lock.acquire(timeout)

    def resign(self) -> None:
        self._lock.release()

    @property
    def token(self) -> int | None:
        return self._lock.token

    def is_leader(self) -> bool:
        """This candidate's belief (see `Lock.held`)."""
        return self._lock.held()

    def leader(self) -> tuple[str, int] | None:
        """The current leader's identity and token (a linearizable read), or None."""
        current = self._lock._read()
        if current is None or not isinstance(current.value, dict):
            return None
        return str(current.value.get("data")), current.create_version

    def observe(self, timeout: float = WATCH_TIMEOUT_S) -> Iterator[tuple[str, int] | None]:
        """The leader now, then every change of leader (None while there is none), for ever."""
        start = self.client.watch_once(self.name, None, timeout=0).version  # changes after this are reported
        current = self.leader()
        yield current
        for event in self.client.watch(self.name, start, timeout=timeout):
            if event.key != self.name and event.type != "reset":
                continue
            now = self.leader()
            if now != current:
                current = now
                yield current
