"""Every recipe under faults, with real processes: worker processes use the recipe through different nodes
while a seeded nemesis kills (-9) and pauses (SIGSTOP past the TTL) the master and the workers, and the shared
record (recipe_faults.py) checks the recipe's safety property as the workers report their steps.

The tests share one three-node cluster, healed between tests, and alternate between the blocking and the
asyncio client (the flows are the same; test_flows.py checks both drivers bind them).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from recipe_faults import Holders, Record, Workers, heal, nemesis, quiet_read
from recipe_worker import BARRIER, COUNTER, ELECTION, GROUP, PARTICIPANTS, QUEUE, SEMAPHORE_LIMIT

from coordinated.client import Barrier, Client, CoordinatedError, Counter, GroupMember, Queue
from coordinated.tools.localcluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

NEMESIS_S = 10.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(Path(tmp_path_factory.mktemp("faults")))
    try:
        cluster.bootstrap(3)
        yield cluster
    finally:
        cluster.stop_all(graceful=False)


@pytest.fixture
def urls(cluster: LocalCluster) -> Iterator[list[str]]:
    heal(cluster)
    yield [node.url for node in cluster.nodes.values()]
    heal(cluster)


def run_holders(
    cluster: LocalCluster, record: Record, workers: Workers, seed: int, modes: list[str] | None = None
) -> list[str]:
    try:
        for mode in modes or ["", "", "", ""]:
            workers.start(*([mode] if mode else []))
        return nemesis(cluster, workers, NEMESIS_S, seed, victim=lambda: current_holder(record))
    finally:
        workers.stop_all()
        record.close()


def current_holder(record: Record) -> str | None:
    with record.lock:
        inside = list(record.inside)
    return inside[0] if inside else None


def check_holders(record: Record, workers: Workers, faults: list[str], fenced: bool = True) -> None:
    assert not record.violations, (record.violations, faults)
    # Holders that share (readers, a semaphore's) may mark their keys in one committed state, and so share
    # a token; an exclusive holder's token is its own.
    tokens = [event["token"] for event in record.entered if event.get("kind") != "read" and fenced]
    assert len(set(tokens)) == len(tokens), f"a token given twice: {tokens}"
    assert len(record.entered) >= 3 and len({event["worker"] for event in record.entered}) >= 2, (
        faults,
        workers.output(),
    )
    owners = {event["token"]: event["worker"] for event in record.entered if event.get("kind") != "read"}
    last = 0
    for worker, token in record.accepted:
        assert token >= last and owners.get(token) == worker, (worker, token, owners.get(token))
        last = token
    assert record.accepted or not fenced


@pytest.mark.parametrize("driver", ["blocking", "asyncio"])
def test_lock_excludes_and_fences_under_faults(
    driver: str, cluster: LocalCluster, urls: list[str], tmp_path: Path
) -> None:
    record = Record(urls)
    workers = Workers("lock", driver, urls, record, tmp_path)
    faults = run_holders(cluster, record, workers, seed=40)
    check_holders(record, workers, faults)
    # First come, first served: the holders that still held when they reported, in their queue order.
    places = [(event["created"], event["key"]) for event in record.holding]
    assert places == sorted(places), places


def test_semaphore_admits_at_most_its_limit_under_faults(
    cluster: LocalCluster, urls: list[str], tmp_path: Path
) -> None:
    record = Record(urls, admits=lambda holding: len(holding) <= SEMAPHORE_LIMIT)
    workers = Workers("semaphore", "asyncio", urls, record, tmp_path)
    faults = run_holders(cluster, record, workers, seed=41, modes=["", "", "", "", ""])
    check_holders(record, workers, faults, fenced=False)


def one_writer_or_readers(holding: Holders) -> bool:
    writers = [holder for holder in holding if holder["kind"] == "write"]
    return not writers or len(holding) == 1


def test_read_write_lock_excludes_writers_under_faults(cluster: LocalCluster, urls: list[str], tmp_path: Path) -> None:
    record = Record(urls, admits=one_writer_or_readers)
    workers = Workers("rwlock", "blocking", urls, record, tmp_path)
    faults = run_holders(cluster, record, workers, seed=42, modes=["write", "read", "write", "read", "read"])
    check_holders(record, workers, faults)


def test_counter_is_exact_under_faults(cluster: LocalCluster, urls: list[str], tmp_path: Path) -> None:
    record = Record(urls)
    workers = Workers("counter", "asyncio", urls, record, tmp_path)
    try:
        for _ in range(3):
            workers.start()
        faults = nemesis(cluster, workers, NEMESIS_S, seed=37)
    finally:
        workers.stop_all()
        record.close()
    heal(cluster)
    with Client(urls, retry_timeout=30) as client:
        final = Counter(client, COUNTER).get()
    started = [event for event in record.events if event["op"] == "add"]
    produced = [event["value"] for event in record.events if event["op"] == "added"]
    assert len(produced) >= 5, (faults, workers.output())
    # Each add produced its own value: no two adds read the same value and both wrote on top of it.
    assert len(set(produced)) == len(produced), sorted(produced)
    # Every acknowledged add counted, and nothing counted that was not attempted.
    assert len(produced) <= final <= len(started), (final, len(produced), len(started))
    assert max(produced) <= final


def test_election_has_one_leader_and_proclaims_only_while_leading(
    cluster: LocalCluster, urls: list[str], tmp_path: Path
) -> None:
    record = Record(urls)
    workers = Workers("election", "blocking", urls, record, tmp_path)

    def leader() -> str | None:
        value = quiet_read(urls, ELECTION)
        data = value.get("data") if isinstance(value, dict) else None
        return str(data.get("by") if isinstance(data, dict) else data) if data else None

    try:
        for _ in range(3):
            workers.start()
        faults = nemesis(cluster, workers, NEMESIS_S, seed=38, victim=leader)
    finally:
        workers.stop_all()
        record.close()
    assert not record.violations, (record.violations, faults)
    tokens = [event["token"] for event in record.entered]
    assert len(tokens) >= 3 and len(set(tokens)) == len(tokens), (record.entered, faults, workers.output())
    proclaimed = [event for event in record.events if event["op"] == "proclaimed"]
    assert proclaimed, workers.output()


def until_every_live_worker_reports(record: Record, workers: Workers, op: str, seconds: float = 60) -> set[str]:
    """Waits (at most `seconds`) until every live worker has reported `op`; returns the live workers."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if set(workers.live()) <= {event["worker"] for event in record.events if event["op"] == op}:
            break
        time.sleep(0.2)
    return set(workers.live())


def test_barrier_releases_no_one_until_removed(cluster: LocalCluster, urls: list[str], tmp_path: Path) -> None:
    record = Record(urls)
    workers = Workers("barrier", "blocking", urls, record, tmp_path)
    with Client(urls, retry_timeout=30) as client:
        gate = Barrier(client, BARRIER)
        gate.set_barrier()
        raising = threading.Event()

        def raise_again() -> None:
            """The barrier written again and again while it is up: waiters must wake only on its removal."""
            with Client(urls, retry_timeout=5) as writer:
                while not raising.wait(0.3):
                    with contextlib.suppress(CoordinatedError):
                        Barrier(writer, BARRIER).set_barrier()

        rewriter = threading.Thread(target=raise_again, daemon=True)
        rewriter.start()
        try:
            for _ in range(3):
                workers.start()
            faults = nemesis(cluster, workers, NEMESIS_S, seed=39)
            raising.set()
            rewriter.join(30)
            heal(cluster)
            record.report({"op": "lowering"})
            gate.remove_barrier()
            alive = until_every_live_worker_reports(record, workers, "passed")
        finally:
            workers.stop_all()
            record.close()
    ops = [event["op"] for event in record.events]
    assert "passed" not in ops[: ops.index("lowering")], (ops, faults)
    passed = {event["worker"] for event in record.events if event["op"] == "passed"}
    assert alive and alive <= passed, (ops, workers.output())


def test_double_barrier_releases_only_with_all_participants(
    cluster: LocalCluster, urls: list[str], tmp_path: Path
) -> None:
    record = Record(urls)
    workers = Workers("double-barrier", "asyncio", urls, record, tmp_path)
    try:
        for _ in range(PARTICIPANTS - 1):
            workers.start()
        # One participant short: faults on the master and the participants (killed ones are not replaced,
        # so there are never enough), and no one may enter.
        faults = nemesis(cluster, workers, NEMESIS_S / 2, seed=43, restart=False)
        heal(cluster)
        assert not [event for event in record.events if event["op"] == "entered"], (record.events, faults)
        while len(workers.live()) < PARTICIPANTS:
            workers.start()
        alive = until_every_live_worker_reports(record, workers, "entered")
    finally:
        workers.stop_all()
        record.close()
    ops = [(event["op"], event["worker"]) for event in record.events]
    first_entered = next(index for index, (op, _) in enumerate(ops) if op == "entered")
    entering = {worker for op, worker in ops[:first_entered] if op == "entering"}
    assert len(entering) >= PARTICIPANTS, ops
    assert len(alive) == PARTICIPANTS and alive <= {worker for op, worker in ops if op == "entered"}, (
        ops,
        workers.output(),
    )


def test_queue_items_are_each_taken_once_under_faults(cluster: LocalCluster, urls: list[str], tmp_path: Path) -> None:
    record = Record(urls)
    workers = Workers("queue", "blocking", urls, record, tmp_path)
    items = [f"item-{index}" for index in range(40)]
    with Client(urls, retry_timeout=30) as client:
        producer = Queue(client, QUEUE)
        for item in items[:20]:
            producer.put(item)
        try:
            for _ in range(3):
                workers.start()
            faults = nemesis(cluster, workers, NEMESIS_S, seed=44)
            heal(cluster)
            for item in items[20:]:
                producer.put(item)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and producer.size() > 0:
                time.sleep(0.3)
            left = producer.size()
        finally:
            workers.stop_all()
            record.close()
    taken = [event["item"] for event in record.events if event["op"] == "took"]
    assert len(taken) == len(set(taken)), f"taken twice: {sorted(taken)}"
    assert left == 0, (left, faults, workers.output())
    # Every item was acked once; an item acked by a consumer killed before it reported is the only one missing.
    kills = faults.count("kill-worker")
    assert set(taken) <= set(items) and len(items) - len(taken) <= kills, (sorted(set(items) - set(taken)), kills)


def wait_for_reports(record: Record, op: str, count: int) -> None:
    deadline = time.monotonic() + 30
    while sum(event["op"] == op for event in record.events) < count:
        assert time.monotonic() < deadline, f"fewer than {count} {op!r} reports: {record.events}"
        time.sleep(0.1)


def test_group_view_follows_members_under_faults(cluster: LocalCluster, urls: list[str], tmp_path: Path) -> None:
    record = Record(urls)
    workers = Workers("group", "asyncio", urls, record, tmp_path)
    views: list[dict[str, object]] = []
    try:
        for _ in range(3):
            workers.start()
        wait_for_reports(record, "joined", 3)
        faults = nemesis(cluster, workers, NEMESIS_S, seed=45)
        heal(cluster)
        workers.signal(workers.live()[0], signal.SIGKILL)  # a member that surely joined: it must leave
        faults.append("kill-worker")
        with Client(urls, retry_timeout=30) as client, client.session(ttl=5.0) as session:
            observer = GroupMember(client, GROUP, session, "observer")
            # Killed members leave once their sessions expire; paused ones come back in a new session.
            deadline = time.monotonic() + 20
            alive = set(workers.live())
            while set(final := observer.members()) != alive and time.monotonic() < deadline:
                time.sleep(0.2)
            views.append(next(iter(observer.watch_members())))
    finally:
        workers.stop_all()
        record.close()
    assert alive and set(final) == alive, (final, alive, faults)
    assert set(views[-1]) == set(final)
