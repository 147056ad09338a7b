"""Shared helpers for the sidecar benchmarks: start a local cluster, time HTTP writes, summarize."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp

from coordinated.tools.localcluster import LocalCluster, LocalNode


@contextlib.contextmanager
def cluster(nodes: int, settings: dict[str, str] | None = None) -> Iterator[LocalCluster]:
    with tempfile.TemporaryDirectory(prefix="coordinated-bench-") as workdir:
        local = LocalCluster(Path(workdir), settings=settings if settings is not None else {}, max_nodes=nodes + 1)
        try:
            local.bootstrap(nodes, timeout=60)
            yield local
        finally:
            local.stop_all(graceful=False)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary_ms(values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return (
        f"n={len(ms)} p50={percentile(ms, 50):.2f}ms p99={percentile(ms, 99):.2f}ms "
        f"mean={statistics.fmean(ms):.2f}ms max={max(ms):.2f}ms"
    )


async def timed_writes(node: LocalNode, count: int, prefix: str, value: object = 1) -> list[float]:
    latencies = []
    async with aiohttp.ClientSession() as session:
        for i in range(count):
            started = time.perf_counter()
            async with session.put(f"{node.url}/_cluster/metadata/{prefix}{i}", json=value) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"write failed: {response.status}")
            latencies.append(time.perf_counter() - started)
    return latencies


async def throughput(nodes: list[LocalNode], clients: int, seconds: float) -> tuple[float, list[float]]:
    """Writes per second with `clients` concurrent sequential writers spread over `nodes`."""
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds

    async def client(index: int, session: aiohttp.ClientSession) -> None:
        nonlocal errors
        node = nodes[index % len(nodes)]
        i = 0
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            async with session.put(f"{node.url}/_cluster/metadata/c{index}-{i}", json=i) as response:
                await response.read()
                if response.status == 200:
                    latencies.append(time.perf_counter() - started)
                else:
                    errors += 1
            i += 1

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.perf_counter()
        await asyncio.gather(*(client(i, session) for i in range(clients)))
        elapsed = time.perf_counter() - started
    if errors:
        print(f"   ({errors} errors)")
    return len(latencies) / elapsed, latencies
