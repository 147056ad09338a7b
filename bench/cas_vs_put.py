"""Compare-and-set writes next to plain writes, on a 3-node cluster with default settings.

- Sequential latency through the master: plain `PUT`s, and `PUT ?if_version=N` on one key (each with the
  version the previous write returned, so every CAS succeeds and costs one request).
- Throughput with N concurrent clients through every node: plain writes to distinct keys; CAS on each
  client's own key (no conflicts); CAS on one shared counter (read, then CAS; a 409 means read again),
  where the figure is successful increments per second, next to the conflicts.

    flock /tmp/bench.lock .venv/bin/python bench/cas_vs_put.py [--writes 300] [--clients 16] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

import aiohttp
from peers_env import conditions
from sidecar_common import cluster, summary_ms

from coordinated.tools.localcluster import LocalNode


async def sequential(node: LocalNode, count: int, cas: bool) -> list[float]:
    latencies = []
    version = 0  # 0: the key must not exist yet
    key = f"seq-{'cas' if cas else 'put'}-{time.monotonic_ns()}"
    async with aiohttp.ClientSession() as http:
        for i in range(count):
            url = f"{node.url}/_cluster/metadata/{key}" + (f"?if_version={version}" if cas else "")
            started = time.perf_counter()
            async with http.put(url, json=i) as response:
                body = await response.json()
                if response.status != 200:
                    raise RuntimeError(f"write failed: {response.status} {body}")
            latencies.append(time.perf_counter() - started)
            version = body["version"]
    return latencies


async def concurrent(nodes: list[LocalNode], clients: int, seconds: float, mode: str) -> tuple[float, int, list[float]]:
    """(successful writes per second, conflicts, latencies of the successful writes)."""
    latencies: list[float] = []
    conflicts = 0
    deadline = time.perf_counter() + seconds

    async def client(index: int, http: aiohttp.ClientSession) -> None:
        nonlocal conflicts
        node = nodes[index % len(nodes)]
        key = "shared-counter" if mode == "cas-shared" else f"{mode}-{index}"
        version = 0
        i = 0
        while time.perf_counter() < deadline:
            if mode == "cas-shared":
                async with http.get(f"{node.url}/_cluster/metadata/{key}") as response:
                    version = (await response.json())["version"] if response.status == 200 else 0
            url = f"{node.url}/_cluster/metadata/{key}" + (f"?if_version={version}" if mode != "put" else "")
            if mode == "put":
                url = f"{node.url}/_cluster/metadata/{key}-{i}"
            started = time.perf_counter()
            async with http.put(url, json=i) as response:
                body = await response.json()
            if response.status == 200:
                latencies.append(time.perf_counter() - started)
                version = body["version"]
            elif response.status == 409:
                conflicts += 1
            i += 1

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(i, http) for i in range(clients)))
        elapsed = time.perf_counter() - started
    return len(latencies) / elapsed, conflicts, latencies


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--writes", type=int, default=300)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="coordinated-cas-") as workdir:
        print(f"conditions: {conditions(Path(workdir))}; load {os.getloadavg()}")
    with cluster(3) as local:
        master = local.wait_master()
        nodes = local.running()
        asyncio.run(sequential(master, 30, cas=False))
        # Interleaved, so that a change in the machine's load hits both alike.
        plain: list[float] = []
        cas: list[float] = []
        for _ in range(3):
            plain += asyncio.run(sequential(master, args.writes // 3, cas=False))
            cas += asyncio.run(sequential(master, args.writes // 3, cas=True))
        print(f"sequential via the master, plain PUT:        {summary_ms(plain)}")
        print(f"sequential via the master, PUT ?if_version:  {summary_ms(cas)}")
        for mode in ("put", "cas-own", "cas-shared"):
            rate, conflicts, latencies = asyncio.run(concurrent(nodes, args.clients, args.seconds, mode))
            print(
                f"{args.clients} clients over 3 nodes, {mode:10s}: {rate:7.1f} successful writes/s, "
                f"{conflicts} conflicts (409); latency {summary_ms(latencies)}"
            )


if __name__ == "__main__":
    main()
