"""Waiting on keys, shared by the recipes: until one key is deleted, with an optional deadline."""

from __future__ import annotations

import time

from coordinated.client import operations
from coordinated.client.base import ClientBase
from coordinated.client.errors import ChangesGone
from coordinated.client.flow import Flow

WATCH_TIMEOUT_S = 30.0


def remaining(deadline: float | None) -> float:
    """Seconds to the deadline, at most one watch's timeout (None: no deadline)."""
    return WATCH_TIMEOUT_S if deadline is None else max(0.0, min(WATCH_TIMEOUT_S, deadline - time.monotonic()))


def deadline_of(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def wait_for_delete(client: ClientBase, key: str, after: int, deadline: float | None) -> Flow[None]:
    """Returns when `key` is deleted after version `after` (or may have been: the watch fell behind the
    change log), or at the deadline. One watched key: waiters never poll."""
    while remaining(deadline) > 0:
        try:
            batch = yield from operations.watch_once(client, key, after, timeout=remaining(deadline))
        except ChangesGone:
            return
        if any(event.key == key and event.type == "delete" for event in batch.events):
            return
        after = batch.version
