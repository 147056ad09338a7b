"""The measurements, identical for every system: only `System.put` and `System.leader_of` differ."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time

from bench.harness.local import rss_mb
from bench.harness.systems import System, percentile

# The same client timeout for every system: a write sent to a node that has not yet noticed the failure
# waits this long before the writer rotates, so it rounds failover windows up (reported alongside).
CLIENT_TIMEOUT_S = 2.0
# A bounded key space, so that the stored state does not grow without end over a run (for every system).
KEYS_PER_CLIENT = 16
# Every benchmark write carries a value never written before in this run. We (like Elasticsearch) publish
# nothing for a write that leaves the state unchanged, so a repeated key/value pair (a second phase writing
# what the first wrote) would time a no-op for us and a full write for etcd, which appends every Put to its log.
_fresh_values = itertools.count(1)


async def sequential(system: System, node: int, writes: int) -> dict[str, float]:
    latencies = []
    for i in range(writes):
        started = time.perf_counter()
        if not await system.put(node, f"s{i % 100}", next(_fresh_values), timeout=10.0):
            raise RuntimeError(f"{system.label}: sequential write failed")
        latencies.append(time.perf_counter() - started)
    ms = [v * 1000 for v in latencies]
    return {"p50": percentile(ms, 50), "p99": percentile(ms, 99)}


async def throughput(
    system: System, clients: int, seconds: float, first: int = 0, shared_keys: int | None = None
) -> dict[str, float]:
    """Acknowledged writes/s with `clients` sequential writers spread over all nodes, client i on node
    `first + i` (modulo the size). Each client cycles over KEYS_PER_CLIENT keys of its own, or, with
    `shared_keys`, writes only key `i % shared_keys` of that many keys every client shares (hot keys)."""
    done = errors = 0
    deadline = time.perf_counter() + seconds

    async def client(index: int) -> None:
        nonlocal done, errors
        node = (first + index) % system.size
        for i in itertools.count():
            if time.perf_counter() >= deadline:
                return
            key = f"t{index}-{i % KEYS_PER_CLIENT}" if shared_keys is None else f"hot{index % shared_keys}"
            if await system.put(node, key, next(_fresh_values), timeout=10.0):
                done += 1
            else:
                errors += 1

    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    return {"rate": done / (time.perf_counter() - started), "writes": done, "errors": errors}


async def fault_trial(system: System, sig: int) -> dict[str, float]:
    """Signal the leader; the window is from the signal to the first successful write sent after it, by
    one sequential writer that rotates over the other nodes after each error."""
    leader = await system.wait_healthy()
    others = [i for i in range(system.size) if i != leader]
    signalled_at: float | None = None
    first_ok: float | None = None
    seen_at: float | None = None

    async def writer() -> None:
        nonlocal first_ok
        position = 0
        for i in itertools.count():
            sent_after = signalled_at is not None  # a write already in flight at the signal does not count
            if await system.put(others[position], f"f{i % 100}", next(_fresh_values), timeout=CLIENT_TIMEOUT_S):
                if sent_after:
                    first_ok = time.monotonic()
                    return
            else:
                position = (position + 1) % len(others)

    async def observer() -> None:
        nonlocal seen_at
        while True:
            try:
                new = await system.agreed_leader(others)
            except Exception:
                new = None
            if new is not None and new != leader:
                seen_at = time.monotonic()
                return
            await asyncio.sleep(0.01)

    task = asyncio.create_task(writer())
    await asyncio.sleep(0.5)
    signalled_at = time.monotonic()
    os.kill(system.pid(leader), sig)
    watcher = asyncio.create_task(observer())
    try:
        await asyncio.wait_for(asyncio.gather(task, watcher), timeout=120)
    finally:
        task.cancel()
        watcher.cancel()
        if sig == signal.SIGSTOP:
            os.kill(system.pid(leader), signal.SIGCONT)
        else:
            await system.restart(leader)
    assert first_ok is not None and seen_at is not None
    return {"window": (first_ok - signalled_at) * 1000, "observed": (seen_at - signalled_at) * 1000}


async def idle_rss(system: System, idle_s: float) -> list[float]:
    await asyncio.sleep(idle_s)
    return [rss_mb(system.pid(i)) for i in range(system.size)]
