"""Diff efficiency: bytes sent to each follower and latency for a one-key write into a 10-key state and
into a 10,000-key state (3 nodes, default settings).

    .venv/bin/python bench/sidecar_diff.py [--writes 50]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

import aiohttp
from sidecar_common import cluster, percentile, timed_writes

from coordinated.tools.localcluster import LocalNode


def sent_bytes(master: LocalNode) -> dict[str, int]:
    _, text = master.get("/metrics")
    out = {}
    for line in text.splitlines():
        if line.startswith("coordinated_transport_sent_bytes_total{"):
            destination = line.split('peer="', 1)[1].split('"', 1)[0]
            out[destination] = int(float(line.rsplit(" ", 1)[1]))
    return out


async def fill(node: LocalNode, keys: int) -> None:
    connector = aiohttp.TCPConnector(limit=32)
    async with aiohttp.ClientSession(connector=connector) as session:
        semaphore = asyncio.Semaphore(32)

        async def put(i: int) -> None:
            async with (
                semaphore,
                session.put(f"{node.url}/_cluster/metadata/fill-{i:05d}", json={"i": i, "pad": "x" * 40}) as r,
            ):
                await r.read()

        await asyncio.gather(*(put(i) for i in range(keys)))


def measure(keys: int, writes: int) -> None:
    with cluster(3) as local:
        master = local.wait_master()
        asyncio.run(fill(master, keys))
        _, state = master.get("/_cluster/state")
        state_bytes = len(str(state["metadata"]["kv"]))
        before = sent_bytes(master)
        latencies = asyncio.run(timed_writes(master, writes, "one-", value="v"))
        after = sent_bytes(master)
        per_write = {dest: (after[dest] - before.get(dest, 0)) / writes for dest in after}
        ms = [x * 1000 for x in latencies]
        print(
            f"{keys:6d}-key state (~{state_bytes // 1024} KiB kv): bytes per follower per one-key write "
            f"{statistics.fmean(per_write.values()):.0f} (incl. commit and checks); write latency "
            f"p50={percentile(ms, 50):.2f}ms p99={percentile(ms, 99):.2f}ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--writes", type=int, default=50)
    args = parser.parse_args()
    for keys in (10, 10_000):
        measure(keys, args.writes)


if __name__ == "__main__":
    main()
