"""History bytes per write on 3 real local nodes: this tree, and (with --baseline) another source tree in the
same run, for one-key writes of small values, sequential and from 8 concurrent clients (or the --clients given).

    flock /tmp/bench.lock .venv/bin/python bench/history_bytes.py [--writes 20000] [--baseline /tmp/history-base]
    flock /tmp/bench.lock .venv/bin/python bench/history_bytes.py --writes 2000 --clients 1 [--nodes 3]

The second form is what sizes a data volume (docs/operator.md): the history bytes each node keeps per write.

For each node it reports, per acknowledged write:
- on disk: every history file (closed compressed segments and the open plain one) after the run, once the node
  has compressed what it closed;
- archived: every segment compressed as the node compresses a closed one (zstd level 3), the open one too: what an
  archive keeps, and what the disk holds in the long run, where the open segment is a bounded remainder.
`history.segment_size` is 1mb here so that most of a short run is in closed segments (the default, 16mb, only
delays compression). Prints figures and never asserts them; every node started is stopped by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import aiohttp
import zstandard

from coordinated.tools.localcluster import LocalCluster, LocalNode

SETTINGS = {"history.segment_size": "1mb"}
COMPRESSION_LEVEL = 3
SETTLE_S = 8.0  # a maintenance pass (every 5 s) compresses what the run closed


def history_files(node: LocalNode) -> list[Path]:
    folder = node.data_dir / "history"
    return sorted(p for p in folder.iterdir() if p.name.startswith("segment-")) if folder.exists() else []


def on_disk(node: LocalNode) -> int:
    return sum(p.stat().st_size for p in history_files(node))


def archived(node: LocalNode) -> int:
    compressor = zstandard.ZstdCompressor(level=COMPRESSION_LEVEL, write_checksum=True)
    total = 0
    for path in history_files(node):
        total += path.stat().st_size if path.name.endswith(".zst") else len(compressor.compress(path.read_bytes()))
    return total


async def write(nodes: list[LocalNode], writes: int, clients: int) -> None:
    """`writes` one-key writes of small values, from `clients` concurrent sequential writers over the nodes."""
    counter = iter(range(writes))

    async def client(index: int, session: aiohttp.ClientSession) -> None:
        node = nodes[index % len(nodes)]
        for i in counter:
            async with session.put(f"{node.url}/_cluster/metadata/key{i % 100}", json={"n": i}) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"write {i} failed on {node.name}: HTTP {response.status}")

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(client(c, session) for c in range(clients)))


def measure(tree: str | None, writes: int, clients: int, node_count: int = 3) -> dict[str, tuple[float, float]]:
    """Per node: (on-disk bytes per write, archived bytes per write) for one fresh cluster."""
    prefix = (lambda _i: ["env", f"PYTHONPATH={tree}/core:{tree}/sidecar:{tree}/tools"]) if tree else None
    with tempfile.TemporaryDirectory(prefix="history-bytes-") as workdir:
        cluster = LocalCluster(Path(workdir), settings={**SETTINGS}, argv_prefix=prefix)
        try:
            nodes = cluster.bootstrap(node_count, timeout=60)
            master = cluster.wait_master()
            assert master is not None
            before = {n.name: (on_disk(n), archived(n)) for n in nodes}
            asyncio.run(write(nodes if clients > 1 else [master], writes, clients))
            time.sleep(SETTLE_S)
            role = {n.name: "master" if n is master else "follower" for n in nodes}
            return {
                f"{n.name} ({role[n.name]})": (
                    (on_disk(n) - before[n.name][0]) / writes,
                    (archived(n) - before[n.name][1]) / writes,
                )
                for n in nodes
            }
        finally:
            cluster.stop_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=20_000)
    parser.add_argument("--baseline", help="another source tree to measure in the same run (e.g. /tmp/history-base)")
    parser.add_argument("--clients", type=int, action="append", help="concurrent clients (repeatable; default 1 and 8)")
    parser.add_argument("--nodes", type=int, default=3)
    args = parser.parse_args()
    client_counts: list[int] = args.clients or [1, 8]
    trees: list[tuple[str, str | None]] = [("this tree", None)]
    if args.baseline:
        trees.append((f"baseline {args.baseline}", args.baseline))
    results: dict[tuple[str, int], dict[str, tuple[float, float]]] = {}
    for clients in client_counts:
        for label, tree in trees:
            figures = measure(tree, args.writes, clients, args.nodes)
            results[(label, clients)] = figures
            print(f"\n{label}, {clients} client(s), {args.writes} writes: bytes per write per node")
            for node, (disk, kept) in figures.items():
                print(f"  {node:22} on disk {disk:7.1f}   archived {kept:7.1f}")
            disks = [d for d, _ in figures.values()]
            kepts = [k for _, k in figures.values()]
            print(f"  {'mean':22} on disk {sum(disks) / len(disks):7.1f}   archived {sum(kepts) / len(kepts):7.1f}")
    if args.baseline:
        print("\nratio this tree / baseline (mean over nodes, on disk):")
        for clients in client_counts:
            ours = sum(d for d, _ in results[("this tree", clients)].values())
            theirs = sum(d for d, _ in results[(trees[1][0], clients)].values())
            print(f"  {clients} client(s): {ours / theirs:.3f}")


if __name__ == "__main__":
    main()
