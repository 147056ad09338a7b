"""Commit latency of sequential writes (p50/p99), and write throughput with 1, 16 and 64 clients on 3 and 5
nodes. Default protocol settings; writes go through every node (followers forward to the master).

    .venv/bin/python bench/sidecar_latency.py [--writes 500] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio

from sidecar_common import cluster, summary_ms, throughput, timed_writes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--writes", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with cluster(3) as local:
        master = local.wait_master()
        follower = next(node for node in local.running() if node is not master)
        asyncio.run(timed_writes(master, 50, "warm"))
        print(
            f"sequential writes, 3 nodes, via the master:   {summary_ms(asyncio.run(timed_writes(master, args.writes, 'm')))}"
        )
        print(
            f"sequential writes, 3 nodes, via a follower:   {summary_ms(asyncio.run(timed_writes(follower, args.writes, 'f')))}"
        )
    for size in (3, 5):
        with cluster(size) as local:
            nodes = local.running()
            asyncio.run(timed_writes(nodes[0], 50, "warm"))
            for clients in (1, 16, 64):
                rate, latencies = asyncio.run(throughput(nodes, clients, args.seconds))
                print(
                    f"throughput, {size} nodes, {clients:2d} clients: {rate:8.1f} writes/s   latency {summary_ms(latencies)}"
                )


if __name__ == "__main__":
    main()
