"""What `coordinated.client` adds to a write, against a raw HTTP request to the same node in the same run.

A 3-node cluster; one sequential writer through the master, in rounds that alternate the drivers so that the
machine's drift falls on all alike:
- `raw aiohttp`: one aiohttp session, a PUT and a read of the answer (the floor: what the sidecar benchmarks
  time);
- `raw httpx`: one `httpx.AsyncClient` request (what the client sends through);
- `AsyncClient` and `Client`: `client.put(key, value)`, with its retries, master following and parsing.

The figures are each driver's p50 and p99 and the ratio of its p50 to the raw aiohttp p50.

    flock /tmp/bench.lock .venv/bin/python -m bench client-overhead [--writes 400] [--rounds 5]
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable

import aiohttp
import httpx

from bench.harness.local import cluster, percentile
from coordinated.client import AsyncClient, Client
from coordinated.tools.localcluster import LocalNode

Writer = Callable[[str, int], Awaitable[None]]


async def timed(write: Writer, prefix: str, count: int) -> list[float]:
    latencies = []
    for i in range(count):
        started = time.perf_counter()
        await write(f"{prefix}{i}", i)
        latencies.append(time.perf_counter() - started)
    return latencies


async def measure(master: LocalNode, writes: int, rounds: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {"raw aiohttp": [], "raw httpx": [], "AsyncClient": [], "Client": []}
    async with (
        aiohttp.ClientSession() as session,
        httpx.AsyncClient() as raw_httpx,
        AsyncClient(master.url, follow_master=False) as async_client,
    ):
        blocking = Client(master.url, follow_master=False)

        async def with_aiohttp(key: str, value: int) -> None:
            async with session.put(f"{master.url}/_cluster/metadata/{key}", json=value) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"write failed: {response.status}")

        async def with_httpx(key: str, value: int) -> None:
            response = await raw_httpx.put(f"{master.url}/_cluster/metadata/{key}", json=value)
            if response.status_code != 200:
                raise RuntimeError(f"write failed: {response.status_code}")

        async def with_async_client(key: str, value: int) -> None:
            await async_client.put(key, value)

        async def with_blocking_client(key: str, value: int) -> None:
            # Off the event loop, as a blocking application would call it; the thread hop is not timed.
            done = threading.Event()
            elapsed: list[float] = []

            def run() -> None:
                started = time.perf_counter()
                blocking.put(key, value)
                elapsed.append(time.perf_counter() - started)
                done.set()

            threading.Thread(target=run).start()
            while not done.is_set():
                await asyncio.sleep(0.0005)
            results["Client"].append(elapsed[0])

        drivers: dict[str, Writer] = {
            "raw aiohttp": with_aiohttp,
            "raw httpx": with_httpx,
            "AsyncClient": with_async_client,
        }
        for round_ in range(rounds):
            for name, write in drivers.items():
                results[name] += await timed(write, f"{name.replace(' ', '-')}-{round_}-", writes)
            for i in range(writes):
                await with_blocking_client(f"Client-{round_}-{i}", i)
        blocking.close()
    return results


def main(writes: int, rounds: int) -> None:
    with cluster(3) as local:
        master = local.wait_master()
        results = asyncio.run(measure(master, writes, rounds))
    floor = percentile([v * 1000 for v in results["raw aiohttp"]], 50)
    print(f"3 nodes, sequential writes through the master, {rounds} rounds of {writes} per driver")
    print(f"{'driver':<14} {'p50 ms':>8} {'p99 ms':>8} {'p50 / raw aiohttp':>18}")
    for name, values in results.items():
        ms = [v * 1000 for v in values]
        print(f"{name:<14} {percentile(ms, 50):8.3f} {percentile(ms, 99):8.3f} {percentile(ms, 50) / floor:18.2f}")
