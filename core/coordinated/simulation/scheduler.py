"""Virtual time and what happens next: queued actions (message deliveries, client steps, faults) and the nodes'
own timers, taken in time order; actions queued for the same instant run in the order they were queued."""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterable


class Scheduler:
    def __init__(self) -> None:
        self.now = 0
        self.steps = 0
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self._sequence = itertools.count()

    def schedule(self, at: int, action: Callable[[], None]) -> None:
        heapq.heappush(self._queue, (at, next(self._sequence), action))

    def _next_event(self, deadlines: Iterable[tuple[int, int | None]]) -> tuple[int, int | None]:
        """The time of the next queued action or timer, and the index of the node whose timer it is (or None).
        A timer comes first only when strictly earlier than everything before it."""
        best: float = self._queue[0][0] if self._queue else math.inf
        best_node: int | None = None
        for index, deadline in deadlines:
            if deadline is not None and deadline < best:
                best, best_node = deadline, index
        return (int(best) if best != math.inf else -1), best_node

    def step(self, until: int, deadlines: Iterable[tuple[int, int | None]], tick: Callable[[int], None]) -> bool:
        """Run the next action or timer (`tick(node index)`) if it falls by `until`; else move the clock to
        `until` and say so."""
        at, node_index = self._next_event(deadlines)
        if at < 0 or at > until:
            self.now = until
            return False
        self.now = max(self.now, at)
        if node_index is not None:
            tick(node_index)
        else:
            _, _, action = heapq.heappop(self._queue)
            action()
        self.steps += 1
        return True
