"""The master's task queue: pending updates wait here and run together in one publication."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum

from coordinated.coordination.client import ClientResult
from coordinated.coordination.tasks import TaskPayload


class Priority(IntEnum):
    IMMEDIATE = 0  # node removals
    URGENT = 1  # elections, joins, reconfiguration, exclusions
    HIGH = 2  # settings
    NORMAL = 3  # client writes


@dataclass
class Task:
    source: str  # why: "elected-as-master", "node-join", "put [key]", ...
    priority: Priority
    payload: TaskPayload
    reply: Callable[[ClientResult], None]  # called once with the task's result
    deadline: int | None = None  # a task not started by then fails with a timeout
    sequence: int = 0


@dataclass
class MasterService:
    pending: list[Task] = field(default_factory=list)
    _sequence: itertools.count[int] = field(default_factory=itertools.count)

    def add(self, task: Task) -> None:
        task.sequence = next(self._sequence)
        self.pending.append(task)

    def take_batch(self, limit: int = 10_000) -> list[Task]:
        """All pending tasks, most urgent first, oldest first within a priority."""
        self.pending.sort(key=lambda task: (task.priority, task.sequence))
        batch, self.pending = self.pending[:limit], self.pending[limit:]
        return batch

    def put_back(self, tasks: list[Task]) -> None:
        """Tasks taken in a batch that did not run (batch_writes): they keep their place, their sequence."""
        self.pending.extend(tasks)

    def take_expired(self, now: int) -> list[Task]:
        expired = [task for task in self.pending if task.deadline is not None and task.deadline <= now]
        if expired:
            self.pending = [task for task in self.pending if task not in expired]
        return expired

    def next_expiry(self) -> int | None:
        deadlines = [task.deadline for task in self.pending if task.deadline is not None]
        return min(deadlines) if deadlines else None

    def take_all(self) -> list[Task]:
        tasks, self.pending = self.pending, []
        return tasks
