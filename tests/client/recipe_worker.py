"""A worker process of the recipes' fault tests (recipe_faults.py): uses one recipe through the client library,
on the blocking or the asyncio client, and reports each step to the shared record, until killed.

`python recipe_worker.py RECIPE DRIVER NAME RECORD_URL TTL_S ADDRESS,ADDRESS... [ARG...]`
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click
from client_drivers import Driver

from coordinated.client import CoordinatedError, LockTimeout, SessionNotFound
from coordinated.client.recipes import barrier, counter, election, group, lock, queue, rwlock, semaphore

LOCK = "faults/lock"
SEMAPHORE = "faults/semaphore"
SEMAPHORE_LIMIT = 2
RWLOCK = "faults/rwlock"
COUNTER = "faults/counter"
ELECTION = "faults/election"
BARRIER = "faults/barrier"
DOUBLE_BARRIER = "faults/double-barrier"
PARTICIPANTS = 3
QUEUE = "faults/queue"
GROUP = "faults/group"


@dataclass(frozen=True)
class WorkerArgs:
    recipe: str
    driver: str
    name: str
    record: str  # the URL the worker reports each step to
    ttl: float
    addresses: list[str]
    extra: list[str]


class Worker:
    def __init__(self, args: WorkerArgs) -> None:
        self.name = args.name
        self.record = args.record
        self.ttl = args.ttl
        self.extra: list[str] = args.extra
        self.driver = Driver(args.driver)
        # Not following the master: each worker goes through its own first node (followers forward).
        self.client = self.driver.client(args.addresses, retry_timeout=10, request_timeout=3, follow_master=False)

    def report(self, op: str, **fields: Any) -> bool:
        body = json.dumps({"op": op, "worker": self.name, **fields}).encode()
        request = urllib.request.Request(self.record, data=body, method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            return bool(json.loads(response.read())["accepted"])

    def run(self, call: Any) -> Any:
        return self.driver.run(call)

    def pick(self, module: Any, blocking: str) -> Any:
        return self.driver.pick(getattr(module, blocking), getattr(module, "Async" + blocking))

    def in_sessions(self, body: Callable[[Any], None]) -> None:
        """`body(session)` over and over, in a new session whenever the last one ended."""
        while True:
            try:
                session = self.driver.session(self.client, ttl=self.ttl)
                while not session.expired.is_set():
                    body(session)
                self.run(session.end())
            except (SessionNotFound, CoordinatedError, OSError):
                time.sleep(0.2)


def hold(worker: Worker, make: Callable[[Any], Any], fenced: bool) -> None:
    """Acquire, act a little (with `fenced`, write to the fenced resource with the token), release."""

    def body(session: Any) -> None:
        held = make(session)
        try:
            token = worker.run(held.acquire(timeout=10))
        except LockTimeout:
            return
        worker.report("enter", key=held.key, token=token, kind=held.kind, created=held.created)
        for _ in range(5):
            if fenced and not worker.report("write", token=token):
                break  # fenced off: a later holder exists
            worker.driver.sleep(0.05)
        worker.run(held.release())
        worker.report("exit")

    worker.in_sessions(body)


def hold_lock(worker: Worker) -> None:
    lock_class = worker.pick(lock, "Lock")
    hold(worker, lambda session: lock_class(worker.client, LOCK, session, data=worker.name), fenced=True)


def hold_slot(worker: Worker) -> None:
    semaphore_class = worker.pick(semaphore, "Semaphore")
    hold(worker, lambda session: semaphore_class(worker.client, SEMAPHORE, session, SEMAPHORE_LIMIT), fenced=False)


def read_or_write(worker: Worker) -> None:
    """Writers write to the fenced resource; readers only hold."""
    lock_class = worker.pick(rwlock, "ReadWriteLock")
    mode = worker.extra[0]
    hold(worker, lambda session: lock_class(worker.client, RWLOCK, session, mode), fenced=mode == rwlock.WRITE)


def count(worker: Worker) -> None:
    """Adds 1, again and again, reporting each add before it starts and the value it produced."""
    shared = worker.pick(counter, "Counter")(worker.client, COUNTER)
    while True:
        worker.report("add")
        try:
            value = worker.run(shared.add(1))
        except CoordinatedError:
            worker.report("add-failed")
            continue
        worker.report("added", value=value)


def lead(worker: Worker) -> None:
    """Campaign; once leader, proclaim a few values; resign."""
    election_class = worker.pick(election, "LeaderElection")

    def body(session: Any) -> None:
        candidate = election_class(worker.client, ELECTION, session, worker.name)
        try:
            token = worker.run(candidate.campaign(timeout=10))
        except LockTimeout:
            return
        worker.report("enter", key=candidate.lock.key, token=token)
        for step in range(4):
            try:
                worker.run(candidate.proclaim({"by": worker.name, "token": token, "step": step}))
            except election.NotLeader:
                worker.report("refused", token=token)
                break
            worker.report("proclaimed", key=candidate.lock.key, token=token, step=step)
            worker.driver.sleep(0.2)
        worker.run(candidate.resign())
        worker.report("exit")

    worker.in_sessions(body)


def pass_barrier(worker: Worker) -> None:
    """Waits at the barrier, reports passing it, then waits for it to be raised again."""
    gate = worker.pick(barrier, "Barrier")(worker.client, BARRIER)
    while True:
        try:
            worker.run(gate.wait(timeout=30))
        except CoordinatedError:
            continue
        worker.report("passed")
        worker.driver.sleep(0.3)


def double_barrier(worker: Worker) -> None:
    """One round: enter with the others, report it, leave; then idle."""
    barrier_class = worker.pick(barrier, "DoubleBarrier")
    while True:
        try:
            session = worker.driver.session(worker.client, ttl=worker.ttl)
            participant = barrier_class(worker.client, DOUBLE_BARRIER, session, PARTICIPANTS)
            worker.report("entering")
            worker.run(participant.enter(timeout=120))
            break
        except CoordinatedError:  # our session ended while we waited (paused past the TTL): enter again
            time.sleep(0.2)
    worker.report("entered")
    worker.run(participant.leave(timeout=120))
    worker.report("left")
    while True:
        time.sleep(1)


def consume(worker: Worker) -> None:
    """Take an item, report it taken once the ack succeeded."""
    queue_class = worker.pick(queue, "Queue")

    def body(session: Any) -> None:
        consumer = queue_class(worker.client, QUEUE, session)
        try:
            item = worker.run(consumer.take(timeout=5))
        except LockTimeout:
            return
        worker.driver.sleep(0.05)  # the work
        try:
            worker.run(consumer.ack(item))
        except queue.ClaimLost:
            worker.report("claim-lost", item=item.value)
            return
        worker.report("took", item=item.value)

    worker.in_sessions(body)


def be_member(worker: Worker) -> None:
    """Join the group, in a new session whenever the last one ended."""
    member_class = worker.pick(group, "GroupMember")

    def body(session: Any) -> None:
        member = member_class(worker.client, GROUP, session, worker.name, {"pid": os.getpid()})
        worker.run(member.join())
        worker.report("joined", session=session.id)
        while not session.expired.is_set():
            worker.driver.sleep(0.2)

    worker.in_sessions(body)


RECIPES: dict[str, Callable[[Worker], None]] = {
    "lock": hold_lock,
    "semaphore": hold_slot,
    "rwlock": read_or_write,
    "counter": count,
    "election": lead,
    "barrier": pass_barrier,
    "double-barrier": double_barrier,
    "queue": consume,
    "group": be_member,
}


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("recipe", type=click.Choice(sorted(RECIPES)))
@click.argument("driver", type=click.Choice(["blocking", "asyncio"]))
@click.argument("name")
@click.argument("record")
@click.argument("ttl", type=float)
@click.argument("addresses")
@click.argument("extra", nargs=-1, type=click.UNPROCESSED)
def main(recipe: str, driver: str, name: str, record: str, ttl: float, addresses: str, extra: tuple[str, ...]) -> None:
    RECIPES[recipe](Worker(WorkerArgs(recipe, driver, name, record, ttl, addresses.split(","), list(extra))))


if __name__ == "__main__":
    main()
