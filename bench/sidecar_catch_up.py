"""Catch-up of a node that was down while writes happened: time until it holds the master's state again, and
the bytes the master sent it, with the catch-up by diffs on (the default) and off (the full state, as before:
`cluster.publish.diff_history.max_diffs=0`; also with `transport.max_chunk_size=64kb`, the full state in many
chunk frames), in the same run. Also each node's RSS afterwards.

3 local nodes. The state holds `--keys` keys (with `--pad` bytes each); a follower is stopped gracefully, the
master takes `--writes` writes (updates of `--hot` keys, 32 concurrent clients), then the follower is started
again and polled until its applied state version reaches the master's.

    .venv/bin/python bench/sidecar_catch_up.py [--keys 10000] [--writes 10000] [--hot 500] [--pad 100]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

import aiohttp
from sidecar_common import cluster
from sidecar_diff import sent_bytes

from coordinated.tools.localcluster import LocalCluster, LocalNode

CLIENTS = 32


async def write_all(node: LocalNode, keys: list[str], pad: int) -> None:
    queue = list(reversed(keys))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CLIENTS)) as session:

        async def client() -> None:
            while queue:
                key = queue.pop()
                body = {"key": key, "pad": "x" * pad}
                async with session.put(f"{node.url}/_cluster/metadata/{key}", json=body) as response:
                    await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"write failed: {response.status} {await response.text()}")

        await asyncio.gather(*(client() for _ in range(CLIENTS)))


def applied_version(node: LocalNode) -> int:
    _, health = node.get("/_cluster/health?local=true", timeout=5.0)
    return int(health.get("applied_version") or health.get("version") or -1)


def rss_mib(node: LocalNode) -> float:
    assert node.pid is not None
    for line in Path(f"/proc/{node.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run(label: str, settings: dict[str, str], args: argparse.Namespace) -> None:
    local: LocalCluster
    with cluster(3, settings) as local:
        master = local.wait_master()
        assert master is not None
        asyncio.run(write_all(master, [f"key-{i:06d}" for i in range(args.keys)], args.pad))
        follower = next(node for node in local.running() if node is not master)
        local.stop(follower)
        time.sleep(1.0)  # the master removes it (its connection closed)
        hot = [f"key-{i % args.hot:06d}" for i in range(args.writes)]
        written = time.perf_counter()
        asyncio.run(write_all(master, hot, args.pad))
        write_s = time.perf_counter() - written
        target = applied_version(master)
        before = sent_bytes(master).get(follower.name, 0)
        started = time.perf_counter()
        local.start(follower.name)
        local.wait_http(follower, timeout=60.0)
        serving = time.perf_counter()
        while applied_version(follower) < target:
            time.sleep(0.005)
        done = time.perf_counter()
        caught_up, after_http = done - started, done - serving
        time.sleep(0.5)  # the master's later messages to it (commits, checks) settle
        sent = sent_bytes(master).get(follower.name, 0) - before
        rss = ", ".join(
            f"{'rejoined' if node is follower else 'master' if node is master else 'follower'} {rss_mib(node):.0f} MiB"
            for node in local.running()
        )
        print(
            f"{label:<24} | {args.writes} writes in {write_s:5.1f}s while down | back and caught up in "
            f"{caught_up:6.2f}s (incl. process start; {after_http:5.2f}s after its HTTP port answered) | sent to it {sent / 1024:9.1f} KiB | RSS {rss}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--writes", type=int, default=10_000)
    parser.add_argument("--hot", type=int, default=500, help="how many distinct keys the writes update")
    parser.add_argument("--pad", type=int, default=100, help="bytes of padding per value")
    args = parser.parse_args()
    print(f"state {args.keys} keys of ~{args.pad + 30} bytes; {args.writes} writes to {args.hot} keys while down")
    full_state = {"cluster.publish.diff_history.max_diffs": "0"}
    run("full state (diffs off)", full_state, args)
    # The same full state in many frames: what chunking costs (the default 1mb chunk sends it in 2 frames).
    run("full state, 64 KB chunks", {**full_state, "transport.max_chunk_size": "64kb"}, args)
    run("catch-up by diffs", {}, args)


if __name__ == "__main__":
    main()
