"""`Counter` and `AsyncCounter`: a shared integer, exact under contention and lost answers, written once as
flows.

An `add` reads the key and writes the sum with a compare-and-set on the version it read; a conflict (another
client added first) reads again and retries. The key's value is `{"value": n, "recent": [[id, value], ...]}`:
the ids of the last `RECENT` adds with the value each produced, so that an add whose answer was lost (the master died while committing it) is
recognized on the next read, rather than applied twice or not at all.
"""

from __future__ import annotations

import uuid
from typing import Any, Generic

from coordinated.client import operations
from coordinated.client.aio import AsyncClient, AsyncRecipe
from coordinated.client.calls import checked_key
from coordinated.client.errors import NotFound, OutcomeUnknown, VersionConflict
from coordinated.client.flow import Flow, awaiting, blocking
from coordinated.client.models import KeyValue
from coordinated.client.recipes.base import C
from coordinated.client.sync import BlockingRecipe, Client

RECENT = 64  # adds whose answer was lost are recognized while fewer than this many adds followed them


class CounterBase(Generic[C]):
    """An integer at key `name` (0 while the key is absent); `add` is atomic and applied exactly once."""

    def __init__(self, client: C, name: str) -> None:
        self.client = client
        self.name = checked_key(name)


def _read(counter: CounterBase[Any]) -> Flow[KeyValue | None]:
    try:
        return (yield from operations.get(counter.client, counter.name))
    except NotFound:
        return None


def _parts(current: KeyValue | None) -> tuple[int, list[list[Any]]]:
    if current is None:
        return 0, []
    if not isinstance(current.value, dict) or not isinstance(current.value.get("value"), int):
        raise ValueError(f"[{current.key}] is not a counter: {current.value!r}")
    return current.value["value"], list(current.value.get("recent", []))


def get(counter: CounterBase[Any]) -> Flow[int]:
    """The value now (a linearizable read)."""
    value, _ = _parts((yield from _read(counter)))
    return value


def add(counter: CounterBase[Any], delta: int = 1) -> Flow[int]:
    """Adds `delta` exactly once and returns the value it produced."""
    add_id = uuid.uuid4().hex
    while True:
        current = yield from _read(counter)
        value, recent = _parts(current)
        for earlier_id, produced in recent:
            if earlier_id == add_id:
                return int(produced)  # an attempt whose answer was lost had been applied
        new = {"value": value + delta, "recent": [[add_id, value + delta], *recent][:RECENT]}
        try:
            yield from operations.cas(counter.client, counter.name, new, 0 if current is None else current.version)
            return value + delta
        except VersionConflict:
            continue  # another add came first: read it and add on top
        except OutcomeUnknown:
            continue  # the next read says whether it was applied (our id is then among the recent ones)


class Counter(CounterBase[Client], BlockingRecipe):
    __doc__ = CounterBase.__doc__
    get = blocking(get)
    add = blocking(add)


class AsyncCounter(CounterBase[AsyncClient], AsyncRecipe):
    __doc__ = CounterBase.__doc__
    get = awaiting(get)
    add = awaiting(add)
