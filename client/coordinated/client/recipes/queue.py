"""`Queue` and `AsyncQueue`: a FIFO work queue whose items are each taken by exactly one consumer, even when
consumers crash; written once as flows (Curator's `DistributedQueue` with a lock path).

- `put(value)` creates an item under `name/items/`; items are taken in their `create_version` order (then
  key name, for items created in one committed state).
- `take()` claims the first item that no one has claimed: a transaction that creates `name/claims/ID` as an
  ephemeral key of the consumer's session, only if the item still exists and the claim does not. The claim
  goes with the session, so an item claimed by a consumer that crashed becomes available again.
- `ack(item)` finishes the item: a transaction that deletes the item and its claim, only if the claim is
  still this consumer's. Only then is the item taken; an item is acked at most once, so each is taken by
  exactly one consumer. A consumer whose claim was lost (its session ended) gets `ClaimLost`.

Processing is at least once: a consumer that crashes after acting on an item but before `ack` leaves the
item for another consumer. Make the processing idempotent, or fence it with the claim's version (`Item.token`).
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from typing import Any, Generic

from coordinated.client import operations
from coordinated.client.aio import AsyncClient, AsyncRecipe, AsyncSession
from coordinated.client.calls import checked_key, delete_op, put_op
from coordinated.client.errors import (
    ChangesGone,
    CoordinatedError,
    LockTimeout,
    NotFound,
    OutcomeUnknown,
    SessionNotFound,
)
from coordinated.client.flow import Flow, awaiting, blocking
from coordinated.client.models import Compare, KeyValue
from coordinated.client.recipes.base import C, S, require_live_session
from coordinated.client.recipes.turns import in_order
from coordinated.client.recipes.waiting import deadline_of, remaining
from coordinated.client.sync import BlockingRecipe, Client, Session


class ClaimLost(CoordinatedError):
    """The item's claim is no longer this consumer's (its session ended): the item was not acked, and another
    consumer may take it."""


@dataclass(frozen=True)
class Item:
    key: str
    value: Any
    claim: str  # the claim's key
    token: int  # the claim's version: a fencing token for what is done with the item


class QueueBase(Generic[C, S]):
    """A FIFO queue at `name`; consumers claim items through `session` (producers need none)."""

    def __init__(self, client: C, name: str, session: S | None = None) -> None:
        self.client = client
        self._session = session
        self.owner = uuid.uuid4().hex  # recognizes our own claim after an answer was lost
        self.name = checked_key(name)
        self.items = self.name + "/items/"
        self.claims = self.name + "/claims/"

    @property
    def session(self) -> S:
        if self._session is None:
            raise ValueError(f"queue [{self.name}]: taking items needs a session (Queue(client, name, session))")
        return self._session


def put(queue: QueueBase[Any, Any], value: Any) -> Flow[str]:
    """Adds an item at the end of the queue; returns its key."""
    key = checked_key(queue.items + uuid.uuid4().hex)
    yield from operations.put(queue.client, key, value)  # a new key: repeating the put is harmless
    return key


def claim_key(queue: QueueBase[Any, Any], item: str) -> str:
    return queue.claims + item.removeprefix(queue.items)


def _claimable(queue: QueueBase[Any, Any]) -> Flow[tuple[int, list[KeyValue]]]:
    """The unclaimed items in queue order, and the version they were listed at (one state)."""
    listing = yield from operations.list_prefix(queue.client, queue.name + "/")
    claimed = {kv.key for kv in listing.keys if kv.key.startswith(queue.claims)}
    items = [kv for kv in listing.keys if kv.key.startswith(queue.items)]
    return listing.version, [kv for kv in in_order(items) if claim_key(queue, kv.key) not in claimed]


def _claim(queue: QueueBase[Any, Any], item: KeyValue) -> Flow[Item | None]:
    """Claims the item, or None if it was taken or claimed meanwhile."""
    claim = claim_key(queue, item.key)
    mark = {"session": queue.session.id, "consumer": queue.owner}
    try:
        result = yield from operations.txn(
            queue.client,
            [Compare.version(item.key, "=", item.version), Compare.absent(claim)],
            [put_op(claim, mark, session=queue.session.id)],
        )
    except OutcomeUnknown:
        try:
            current = yield from operations.get(queue.client, claim)
        except NotFound:
            return None  # not claimed by us (or no longer): look again
        if current.value != mark:
            return None
        return Item(item.key, item.value, claim, current.version)
    if not result.succeeded:
        return None
    return Item(item.key, item.value, claim, result.results[0]["version"])


def take(queue: QueueBase[Any, Any], timeout: float | None = None) -> Flow[Item]:
    """Claims the first unclaimed item, waiting for one (LockTimeout after `timeout` seconds); `ack` it once
    done with it. Raises SessionNotFound if the session has ended."""
    deadline = deadline_of(timeout)
    while True:
        require_live_session(queue.session)
        version, items = yield from _claimable(queue)
        for item in items:
            claimed = yield from _claim(queue, item)
            if claimed is not None:
                return claimed
        if items:
            continue  # others claimed them first: look again
        if remaining(deadline) <= 0:
            raise LockTimeout(f"queue [{queue.name}] is empty")
        with contextlib.suppress(ChangesGone):  # a new item, or a claim released: look again
            yield from operations.watch_once(queue.client, queue.name + "/", version, timeout=remaining(deadline))


def ack(queue: QueueBase[Any, Any], item: Item) -> Flow[None]:
    """Finishes the item: deletes it with its claim, if the claim is still this consumer's (ClaimLost if not)."""
    try:
        result = yield from operations.txn(
            queue.client, [Compare.version(item.claim, "=", item.token)], [delete_op(item.key), delete_op(item.claim)]
        )
    except OutcomeUnknown:
        # Only our ack removes our claim while our session lives: if both are gone and the session lives, we
        # acked; if the session ended, someone else may have taken the item.
        try:
            yield from operations.keepalive(queue.client, queue.session.id)
        except SessionNotFound:
            raise OutcomeUnknown(f"[{item.key}]: the ack's answer was lost and the session has ended") from None
        try:
            yield from operations.get(queue.client, item.claim)
        except NotFound:
            return
        return (yield from ack(queue, item))  # our claim is still there: the ack did not apply
    if not result.succeeded:
        raise ClaimLost(f"[{item.key}]: the claim is no longer this consumer's; the item was not acked")


def release(queue: QueueBase[Any, Any], item: Item) -> Flow[None]:
    """Gives the item back (deletes the claim if it is still ours): another consumer may take it."""
    yield from operations.txn(queue.client, [Compare.version(item.claim, "=", item.token)], [delete_op(item.claim)])


def size(queue: QueueBase[Any, Any]) -> Flow[int]:
    """How many items are in the queue, claimed or not."""
    return (yield from operations.count(queue.client, queue.items)).count


class Queue(QueueBase[Client, Session], BlockingRecipe):
    __doc__ = QueueBase.__doc__
    put = blocking(put)
    take = blocking(take)
    ack = blocking(ack)
    release = blocking(release)
    size = blocking(size)


class AsyncQueue(QueueBase[AsyncClient, AsyncSession], AsyncRecipe):
    __doc__ = QueueBase.__doc__
    put = awaiting(put)
    take = awaiting(take)
    ack = awaiting(ack)
    release = awaiting(release)
    size = awaiting(size)
