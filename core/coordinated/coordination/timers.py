"""Deadlines kept by the core itself. The shell only calls `Coordinator.tick(now)` at `next_deadline`."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable


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

    def cancel(self, key: Hashable) -> None:
        self._active.pop(key, None)

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
