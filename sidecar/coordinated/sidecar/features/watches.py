"""Where watches wait: parked on this node, by prefix, until an applied state changes a key under it.

A waiting watch costs nothing anywhere else: the master does no work per watcher, and an applied state
wakes only the watchers whose prefix one of its changed keys starts with (a watch on a missing key or a
quiet prefix sleeps through every other change). The cost of an applied state is one lookup per distinct
prefix being watched (see `prefixes_touched`), not per watcher.

Non-local watches first make sure this node has applied what the master has committed (a read barrier).
Those barriers are shared: every watch that arrives while one is in flight joins the next one, so a
thousand watchers re-polling after a change cost the master two barriers, not a thousand.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from coordinated.coordination.state import ClusterState
from coordinated.sidecar.features.change_log import ChangeLog, prefixes_touched

T = TypeVar("T")


class WatchHub:
    def __init__(self, change_log: ChangeLog) -> None:
        self.log = change_log
        self._waiters: dict[str, set[asyncio.Future[bool]]] = {}
        self.closed = False

    @property
    def parked(self) -> int:
        return sum(len(waiters) for waiters in self._waiters.values())

    def on_applied(self, state: ClusterState) -> None:
        keys = self.log.record(state)
        if not keys or not self._waiters:
            return
        for prefix in prefixes_touched(list(self._waiters), keys):
            for waiter in self._waiters.pop(prefix):
                if not waiter.done():
                    waiter.set_result(True)

    async def wait(self, prefix: str, timeout_s: float) -> bool:
        """Until a state changes a key under `prefix` (True), the timeout or the hub closes (False)."""
        if self.closed or timeout_s <= 0:
            return False
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(prefix, set()).add(waiter)
        try:
            return await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError:
            return False
        finally:
            waiters = self._waiters.get(prefix)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[prefix]

    def close(self) -> None:
        """The node is stopping: every watcher answers now."""
        self.closed = True
        waiters, self._waiters = self._waiters, {}
        for group in waiters.values():
            for waiter in group:
                if not waiter.done():
                    waiter.set_result(False)


class SharedBarrier(Generic[T]):
    """Runs `barrier` for many callers at once. A caller never shares a barrier that began before it asked
    (that one may predate a write the caller must see): it joins the next one, which starts when the
    barrier in flight ends."""

    def __init__(self, barrier: Callable[[], Awaitable[T]]) -> None:
        self._barrier = barrier
        self._current: asyncio.Task[T] | None = None
        self._next: asyncio.Task[T] | None = None

    async def __call__(self) -> T:
        if self._next is None:
            self._next = asyncio.get_running_loop().create_task(self._run_after(self._current))
        # Shielded: a caller that gives up (its request timed out) does not cancel it for the others.
        return await asyncio.shield(self._next)

    async def _run_after(self, previous: asyncio.Task[T] | None) -> T:
        if previous is not None:
            await asyncio.wait([previous])
        this = asyncio.current_task()
        self._current, self._next = self._next, None
        try:
            return await self._barrier()
        finally:
            if self._current is this:
                self._current = None
