"""How long a write waits behind a prefix delete of many keys, on 3 real local nodes: this tree, and (with
--baseline) another source tree in the same run.

    flock /tmp/bench.lock .venv/bin/python -m bench prefix-delete [--keys 100000] [--baseline /tmp/prefix-base]

Each tree's cluster (the settings' defaults, as a deployment runs) gets `--keys` keys under `bulk/` (transactions of 64 puts). Then one writer puts a key
outside the prefix, one write after the other, through the master, while the prefix is deleted through a
follower: with `more` (this release: at most 1,000 keys a call) the delete calls again until nothing is left;
a tree without it deletes every key in one call. Reported per tree: the floor (the writer's median write before
the delete, in the same run), the longest write while the delete ran (how long another write waited behind
it) and its ratio to the floor, and the delete's calls and total time. Prints figures and never asserts them;
every node started is stopped by PID.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.harness.systems import tree_pythonpath
from coordinated.tools.localcluster import LocalCluster, LocalNode

PREFIX = "bulk/"
TXN_OPS = 64
LOADERS = 8
FLOOR_WRITES = 200


async def load(node: LocalNode, keys: int) -> None:
    starts = iter(range(0, keys, TXN_OPS))

    async def loader(session: aiohttp.ClientSession) -> None:
        for start in starts:
            ops = [
                {"op": "put", "key": f"{PREFIX}{i:08d}", "value": {"i": i}}
                for i in range(start, min(keys, start + TXN_OPS))
            ]
            async with session.post(f"{node.url}/_cluster/metadata/_txn", json={"success": ops}) as response:
                if response.status != 200:
                    raise RuntimeError(f"loading failed: HTTP {response.status} {await response.text()}")

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(loader(session) for _ in range(LOADERS)))


async def put(session: aiohttp.ClientSession, node: LocalNode, i: int, failures: list[str] | None = None) -> float:
    """How long one write took to be answered; a failed one is listed in `failures` (or raises without it)."""
    started = time.perf_counter()
    async with session.put(f"{node.url}/_cluster/metadata/probe", json={"i": i}) as response:
        body = await response.read()
        if response.status != 200:
            if failures is None:
                raise RuntimeError(f"write {i} failed: HTTP {response.status}")
            failures.append(f"HTTP {response.status} {body[:200].decode(errors='replace')}")
    return time.perf_counter() - started


async def delete_prefix(session: aiohttp.ClientSession, node: LocalNode) -> tuple[int, int, str | None]:
    """(calls, keys deleted, the error that ended it early: a master lost meanwhile, say), calling while `more`."""
    calls = deleted = 0
    while True:
        async with session.delete(f"{node.url}/_cluster/metadata", params={"prefix": PREFIX}) as response:
            body = await response.json()
        calls += 1
        if response.status != 200:
            return calls, deleted, f"HTTP {response.status} {body}"
        deleted += body["deleted"]
        if not body.get("more", False):
            return calls, deleted, None


async def delete_while_writing(master: LocalNode, follower: LocalNode) -> dict[str, Any]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        floor = [await put(session, master, i) for i in range(FLOOR_WRITES)]
        done = asyncio.Event()
        during: list[float] = []
        failed_writes: list[str] = []

        async def writer() -> None:
            i = FLOOR_WRITES
            while not done.is_set():
                during.append(await put(session, master, i, failed_writes))
                i += 1

        writing = asyncio.get_running_loop().create_task(writer())
        started = time.perf_counter()
        try:
            calls, deleted, error = await delete_prefix(session, follower)
        finally:
            took = time.perf_counter() - started
            done.set()
        await writing
    median = statistics.median(floor)
    longest = max(during)
    return {
        "floor_median_s": median,
        "longest_write_during_s": longest,
        "median_write_during_s": statistics.median(during),
        "ratio": longest / median,
        "writes_during": len(during),
        "delete_calls": calls,
        "deleted": deleted,
        "delete_s": took,
        "delete_error": error,
        "failed_writes": failed_writes[:5],
    }


def measure(tree: str | None, keys: int) -> dict[str, Any]:
    prefix = (lambda _i: ["env", f"PYTHONPATH={tree_pythonpath(Path(tree))}"]) if tree else None
    with tempfile.TemporaryDirectory(prefix="prefix-delete-") as workdir:
        cluster = LocalCluster(Path(workdir), settings={}, argv_prefix=prefix)  # the nodes' defaults
        try:
            nodes = cluster.bootstrap(3, timeout=60)
            master = cluster.wait_master()
            follower = next(n for n in nodes if n is not master)
            asyncio.run(load(master, keys))
            return asyncio.run(delete_while_writing(master, follower))
        finally:
            cluster.stop_all()


def run(keys: int, baseline: str | None) -> dict[str, Any]:
    trees: list[tuple[str, str | None]] = [("this tree", None)]
    if baseline:
        trees.append((f"baseline {baseline}", baseline))
    rows = []
    for label, tree in trees:
        figures = measure(tree, keys)
        print(
            f"{label}: {figures['deleted']} keys deleted in {figures['delete_calls']} call(s), "
            f"{figures['delete_s']:.2f} s; a write waited at most {figures['longest_write_during_s'] * 1000:.0f} ms "
            f"({figures['ratio']:.0f}x the floor, the median write before: {figures['floor_median_s'] * 1000:.1f} ms; "
            f"{figures['writes_during']} writes meanwhile, their median {figures['median_write_during_s'] * 1000:.0f} ms)"
        )
        if figures["delete_error"] or figures["failed_writes"]:
            print(f"  the delete ended with: {figures['delete_error']}; failed writes: {figures['failed_writes']}")
        rows.append({"tree": label, **figures})
    return {"options": {"keys": keys, "nodes": 3}, "rows": rows}
