from __future__ import annotations

from coordinated.coordination.master_service import MasterService, Priority, Task
from coordinated.coordination.requests.keys import KvGet
from coordinated.coordination.tasks import ClientTask


def task(source: str, priority: Priority, deadline: int | None = None) -> Task:
    return Task(source, priority, ClientTask(KvGet(source)), lambda result: None, deadline)


def test_batches_run_most_urgent_first_and_oldest_first_within_a_priority() -> None:
    service = MasterService()
    for item in (task("put-1", Priority.NORMAL), task("left", Priority.IMMEDIATE), task("put-2", Priority.NORMAL)):
        service.add(item)
    service.add(task("join", Priority.URGENT))
    assert [t.source for t in service.take_batch()] == ["left", "join", "put-1", "put-2"]
    assert service.pending == []


def test_tasks_past_their_deadline_are_taken_out_before_they_run() -> None:
    service = MasterService()
    service.add(task("late", Priority.NORMAL, deadline=100))
    service.add(task("on-time", Priority.NORMAL, deadline=500))
    service.add(task("no-deadline", Priority.NORMAL))
    assert service.next_expiry() == 100
    assert [t.source for t in service.take_expired(200)] == ["late"]
    assert [t.source for t in service.take_batch()] == ["on-time", "no-deadline"]
