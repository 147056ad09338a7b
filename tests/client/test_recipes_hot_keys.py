"""The recipes under hot-key concurrency, on one three-node cluster: many clients, each going first through a
different node, on one counter, one lock, one election, one queue and one semaphore at once. Each recipe relies
on versions (a compare-and-set on a version it read or its own write returned, a token that is a write's
version), so each must stay exact when the master batches many writes of the same keys together.

These pass with the old batching too (which gave two writes of one key in a batch one version): a recipe's
shared keys are written only by compare-and-sets decided against the batch's state (the counter, the queue's
claims), and its own keys only by their owner, so no two of its writes of one key ever shared a batch. They
guard the recipes against the new batching (writes of a key deferred to later publications) and document that
each recipe's promise holds when its keys are hot.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from coordinated.client import Client, Counter, LeaderElection, Lock, NotLeader, Queue, Semaphore
from coordinated.tools.localcluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    cluster = LocalCluster(Path(tmp_path_factory.mktemp("hot-keys")))
    try:
        yield [node.url for node in cluster.bootstrap(3)]
    finally:
        cluster.stop_all(graceful=False)


def fresh(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def in_parallel(urls: list[str], count: int, work: Callable[[Client, int], Any]) -> list[Any]:
    """`work(client, index)` in `count` threads at once, each client going first through another node."""
    start = threading.Barrier(count)

    def run(index: int) -> Any:
        first = index % len(urls)
        with Client(urls[first:] + urls[:first], retry_timeout=60) as client:
            start.wait()
            return work(client, index)

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(run, range(count)))


def test_the_counter_is_exact_with_16_clients_adding_at_once(urls: list[str]) -> None:
    name, adds = fresh("counters/hot"), 8

    def add_all(client: Client, index: int) -> list[int]:
        counter = Counter(client, name)
        return [counter.add(1) for _ in range(adds)]

    produced = [value for values in in_parallel(urls, 16, add_all) for value in values]
    assert sorted(produced) == list(range(1, 16 * adds + 1))  # every add produced its own value
    with Client(urls) as client:
        assert Counter(client, name).get() == 16 * adds


def test_lock_tokens_strictly_increase_and_fence_a_key_written_with_them(urls: list[str]) -> None:
    """12 contenders take the lock three times each; each holder writes a fenced key here with a transaction
    that compares its lock key's version with its token: the write holds only if nothing was written to the lock
    key since the holder marked it, which is what the token means."""
    name, resource = fresh("locks/hot"), fresh("fenced")
    guard = threading.Lock()
    inside: list[str] = []
    tokens: list[int] = []
    overlaps: list[list[str]] = []

    def hold(client: Client, index: int) -> int:
        fenced = 0
        with client.session(ttl=10.0) as session:
            for _ in range(3):
                lock = Lock(client, name, session, data=index)
                token = lock.acquire(timeout=60)
                with guard:
                    inside.append(lock.key)
                    tokens.append(token)
                    if len(inside) > 1:
                        overlaps.append(list(inside))
                result = client.txn([(lock.key, token)], [{"op": "put", "key": resource, "value": token}])
                fenced += result.succeeded
                with guard:
                    inside.remove(lock.key)
                lock.release()
        return fenced

    fenced = in_parallel(urls, 12, hold)
    assert not overlaps
    assert len(tokens) == 36 and tokens == sorted(set(tokens)), tokens  # strictly increasing, in holding order
    assert fenced == [3] * 12
    with Client(urls) as client:
        assert client.get(resource).value == tokens[-1]


def test_the_election_proclaims_only_while_leading_with_8_candidates(urls: list[str]) -> None:
    name = fresh("leaders/hot")
    guard = threading.Lock()
    reigns: list[tuple[int, int, list[int]]] = []  # (candidate, token, the versions its proclaims returned)

    def lead(client: Client, index: int) -> None:
        with client.session(ttl=10.0) as session:
            election = LeaderElection(client, name, session, identity=index)
            token = election.campaign(timeout=60)
            versions = []
            for round_ in range(4):
                versions.append(election.proclaim({"by": index, "round": round_}))  # NotLeader would fail
                assert election.leader() == ({"by": index, "round": round_}, token)
            with guard:
                reigns.append((index, token, versions))
            election.resign()
            with pytest.raises(NotLeader):
                election.proclaim("after resigning")

    in_parallel(urls, 8, lead)
    assert len(reigns) == 8
    tokens = [token for _, token, _ in reigns]
    assert tokens == sorted(set(tokens))
    for _, token, versions in reigns:
        assert token < versions[0] and versions == sorted(set(versions))


def test_queue_items_are_each_taken_once_by_8_consumers(urls: list[str]) -> None:
    name, count = fresh("queues/hot"), 40
    with Client(urls) as client:
        for item in range(count):
            Queue(client, name).put(item)

    def consume(client: Client, index: int) -> list[tuple[Any, int]]:
        taken = []
        with client.session(ttl=10.0) as session:
            queue = Queue(client, name, session)
            while queue.size() > 0:
                try:
                    item = queue.take(timeout=1)
                except Exception as error:  # LockTimeout: the last items are claimed by others
                    if type(error).__name__ == "LockTimeout":
                        continue
                    raise
                queue.ack(item)  # ClaimLost would fail: no session ends here
                taken.append((item.value, item.token))
        return taken

    taken = [pair for pairs in in_parallel(urls, 8, consume) for pair in pairs]
    assert sorted(value for value, _ in taken) == list(range(count))


def test_the_semaphore_admits_at_most_its_limit_with_10_contenders(urls: list[str]) -> None:
    name, limit = fresh("slots/hot"), 3
    guard = threading.Lock()
    inside: list[int] = []
    most = [0]

    def use(client: Client, index: int) -> None:
        with client.session(ttl=10.0) as session:
            for _ in range(3):
                with Semaphore(client, name, session, limit):
                    with guard:
                        inside.append(index)
                        most[0] = max(most[0], len(inside))
                    with guard:
                        inside.remove(index)

    in_parallel(urls, 10, use)
    assert 1 <= most[0] <= limit
