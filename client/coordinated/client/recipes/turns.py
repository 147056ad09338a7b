"""Taking turns under a prefix: what the lock, the read/write lock, the semaphore and the election share.

Each contender creates its own key under the recipe's prefix, an ephemeral key of its session, and the
contenders' order is their keys' `create_version` order: the order in which the cluster committed them, the
same for everyone. A contender lists the prefix (one state version) and asks its recipe's rule which earlier
keys block it; if none, it holds. Otherwise it watches only the
keys that block it (for a lock, its immediate predecessor) from the listing's version, and lists again once
one of them is deleted: no herd on release, and first come, first served (etcd's `concurrency.Mutex`,
ZooKeeper's lock recipe). Keys written in one committed state share their `create_version` (the master
batches writes): the order is then by key name, and every listing that sees one of them sees them all.

The token: once it holds, the contender writes its own key once more (`"holding": true`, conditional on the
key's version), and that write's version is its token. A later holder's write comes after it saw every earlier
holder's key deleted, so in a later committed state: tokens strictly increase from holder to holder of an
exclusive turn, across master failovers and restarts too, since versions never go back. (A `create_version`
would not do: two keys created in one batch share it.)

A contender whose session ends loses its key in the same committed state: its successors go on, and the
contender finds its key gone (SessionNotFound) instead of holding.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from coordinated.client import operations
from coordinated.client.calls import checked_key
from coordinated.client.errors import (
    ChangesGone,
    LockTimeout,
    NotFound,
    OutcomeUnknown,
    SessionNotFound,
    VersionConflict,
)
from coordinated.client.flow import Flow
from coordinated.client.models import KeyValue
from coordinated.client.recipes.base import C, S, SessionRecipe, require_live_session
from coordinated.client.recipes.waiting import deadline_of, remaining

# Given this contender's key and the earlier ones (in create_version order), the keys that block it.
Rule = Callable[[KeyValue, Sequence[KeyValue]], Sequence[KeyValue]]


class TurnBase(SessionRecipe[C, S]):
    """A contender for `name`: its key is `name/` and a random id, its value `{"owner", "session", "data",
    "kind", "holding"}`. `token` is set while it holds: the version of the write that marked its key holding,
    a fencing token that strictly increases from one holder of an exclusive turn to the next."""

    def __init__(self, client: C, name: str, session: S, data: Any = None, kind: str = "") -> None:
        super().__init__(client, session)
        self.name = checked_key(name)
        self.prefix = self.name + "/"
        self.owner = uuid.uuid4().hex
        self.key = checked_key(self.prefix + self.owner)
        self.data = data
        self.kind = kind
        self.token: int | None = None
        self.created = 0  # its key's create_version: its place in the queue, with the key's name
        self.version = 0  # the key's version (a proclaim changes it; the token stays)

    def held(self) -> bool:
        """This client's belief, not the cluster's: True from acquire until release, while the session is
        `connected` (not once it is suspended, no keepalive having succeeded for a whole TTL, or lost). Only
        a fencing token checked by the resource makes a write safe."""
        return self.token is not None and self.connected()


def value_of(turn: TurnBase[Any, Any], holding: bool = False) -> dict[str, Any]:
    return {"owner": turn.owner, "session": turn.session.id, "data": turn.data, "kind": turn.kind, "holding": holding}


def in_order(keys: Sequence[KeyValue]) -> list[KeyValue]:
    """The contenders' order: create_version, then key name among keys created in one committed state."""
    return sorted(keys, key=lambda kv: (kv.create_version, kv.key))


def contenders(client: Any, prefix: str) -> Flow[tuple[int, list[KeyValue]]]:
    """The keys under `prefix` in the contenders' order, and the version they were listed at (linearizable)."""
    listing = yield from operations.list_prefix(client, prefix)
    return listing.version, in_order(listing.keys)


def enter(turn: TurnBase[Any, Any]) -> Flow[None]:
    """Creates this contender's key (once, even when an answer is lost)."""
    require_live_session(turn.session)
    # The key is ours alone: a conflict means an earlier attempt created it, and the listing says either way.
    with contextlib.suppress(VersionConflict, OutcomeUnknown):
        yield from operations.create(turn.client, turn.key, value_of(turn), session=turn.session.id)


def take_turn(turn: TurnBase[Any, Any], rule: Rule, timeout: float | None) -> Flow[int]:
    """Blocks until no earlier key blocks this contender (LockTimeout, its key deleted, after `timeout`);
    returns its token. Raises SessionNotFound if its session ends meanwhile."""
    deadline = deadline_of(timeout)
    yield from enter(turn)
    try:
        while True:
            version, keys = yield from contenders(turn.client, turn.prefix)
            mine = next((kv for kv in keys if kv.key == turn.key), None)
            if mine is None:  # a create whose answer was lost and that did not apply (or the session ended)
                yield from enter(turn)  # SessionNotFound if the session has ended
                continue
            blockers = rule(mine, keys[: keys.index(mine)])
            if not blockers:
                turn.created = mine.create_version
                return (yield from claim(turn, mine))
            if remaining(deadline) <= 0:
                raise LockTimeout(f"[{turn.name}] is held by another session ({len(blockers)} ahead of this one)")
            yield from wait_for_any_delete(turn, [kv.key for kv in blockers], version, deadline)
    except BaseException:
        if turn.token is None:
            with contextlib.suppress(Exception):  # not holding: leave the queue, or the session's end will
                yield from operations.delete(turn.client, turn.key)
        raise


def claim(turn: TurnBase[Any, Any], mine: KeyValue) -> Flow[int]:
    """Marks this contender's key holding; that write's version is its token."""
    try:
        written = yield from operations.cas(
            turn.client, turn.key, value_of(turn, holding=True), mine.version, session=turn.session.id
        )
        turn.version = written.version
    except OutcomeUnknown:
        current = yield from operations.get(turn.client, turn.key)  # NotFound: the session has ended
        if not current.value.get("holding"):
            return (yield from claim(turn, current))
        turn.version = current.version
    except (VersionConflict, NotFound) as gone:  # only we write our key: it is gone with our session
        raise SessionNotFound(404, "resource_not_found_exception", f"[{turn.key}] is gone: {gone}") from gone
    turn.token = turn.version
    return turn.version


def wait_for_any_delete(
    turn: TurnBase[Any, Any], keys: Sequence[str], after: int, deadline: float | None
) -> Flow[None]:
    """Returns once one of `keys` is deleted after version `after` (or may have been), or at the deadline:
    watching the one key, or the recipe's prefix when several keys may each free a turn (a semaphore)."""
    watched = keys[0] if len(keys) == 1 else turn.prefix
    wanted = set(keys)
    while remaining(deadline) > 0:
        try:
            batch = yield from operations.watch_once(turn.client, watched, after, timeout=remaining(deadline))
        except ChangesGone:
            return
        if any(event.type == "delete" and event.key in wanted for event in batch.events):
            return
        after = batch.version


def leave(turn: TurnBase[Any, Any]) -> Flow[None]:
    """Deletes this contender's key (holding or waiting); its session lives on."""
    turn.token = None
    with contextlib.suppress(NotFound, OutcomeUnknown):  # gone already (the session ended): not ours any more
        yield from operations.delete(turn.client, turn.key)


def predecessor(mine: KeyValue, earlier: Sequence[KeyValue]) -> Sequence[KeyValue]:
    """An exclusive turn: every earlier key blocks, and the latest of them is the one to wait for."""
    return list(earlier[-1:])
