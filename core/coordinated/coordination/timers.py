"""Deadlines kept by the core itself. The shell only calls `Coordinator.tick(now)` at `next_deadline`."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable

# A cancelled or replaced timer stays in the heap (and keeps its key, e.g. a finished Publication with its
# state and tasks, alive) until it reaches the top. Once the heap holds more than twice the live timers (and at
# least this many entries), it is rebuilt from them: amortized O(1), as asyncio does with its cancelled timers.
COMPACT_AT_LEAST = 64


class Timers:
    def __init__(self) -> None:
        self._active: dict[Hashable, tuple[int, int, Callable[[], None]]] = {}
        self._heap: list[tuple[int, int, Hashable]] = []
        self._sequence = 0

    def schedule(self, key: Hashable, at: int, callback: Callable[[], None]) -> None:
        """Set (or replace) the timer named `key`."""
        self._sequence += 1
        self._active[key] = (at, self._sequence, callback)
        heapq.heappush(self._heap, (at, self._sequence, key))
        self._compact_if_mostly_stale()

    def cancel(self, key: Hashable) -> None:
        if self._active.pop(key, None) is not None:
            self._compact_if_mostly_stale()

    def _compact_if_mostly_stale(self) -> None:
        if len(self._heap) >= COMPACT_AT_LEAST and len(self._heap) > 2 * len(self._active):
            self._heap = [(at, sequence, key) for key, (at, sequence, _) in self._active.items()]
            heapq.heapify(self._heap)

    def is_scheduled(self, key: Hashable) -> bool:
        return key in self._active

    def next_deadline(self) -> int | None:
        while self._heap:
            at, sequence, key = self._heap[0]
            entry = self._active.get(key)
            if entry is not None and entry[1] == sequence:
                return at
            heapq.heappop(self._heap)  # cancelled or replaced
        return None

    def pop_due(self, now: int) -> Callable[[], None] | None:
        """The earliest timer due at `now`, removed; None when nothing is due."""
        deadline = self.next_deadline()
        if deadline is None or deadline > now:
            return None
        _, _, key = heapq.heappop(self._heap)
        _, _, callback = self._active.pop(key)
        return callback
