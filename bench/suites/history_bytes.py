"""History bytes per write on 3 real local nodes: this tree, and (with --baseline) another source tree in the
same run, for one-key writes of small values, sequential and from 8 concurrent clients (or the --clients given).

    flock /tmp/bench.lock .venv/bin/python -m bench history-bytes [--writes 20000] [--baseline /tmp/history-base]
    flock /tmp/bench.lock .venv/bin/python -m bench history-bytes --writes 2000 --clients 1 [--nodes 3]

The second form is what sizes a data volume (docs/operator.md): the history bytes each node keeps per write.

For each node it reports, per acknowledged write:
- on disk: every history file (closed compressed segments and the open plain one) after the run, once the node
  has compressed what it closed;
- archived: every segment compressed as the node compresses a closed one (zstd level 3), the open one too: what an
  archive keeps, and what the disk holds in the long run, where the open segment is a bounded remainder;
- the floor beside them: the bytes of key and value that a write carries (its JSON body as the client sends it).
`history.segment_size` is 64kb here so that nearly all of a short run is in closed, compressed segments on every
node, whatever its role: the open segment, plain, is at most 64 KB of the figure (32 bytes per write at 2,000
writes). With 1mb, a follower (two lines per write: `accepted`, then `committed` and `applied` folded) did not
fill its first segment in 2,000 sequential writes while the master (three lines) did, so the followers' figure
was all plain JSON and looked twice the master's although they write less. The default, 16mb, only delays
compression; zstd compresses 64 KB segments of these lines about as well as 1 MB ones. Prints figures and never
asserts them; every node started is stopped by PID.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import zstandard

from bench.harness.systems import tree_pythonpath
from coordinated.tools.localcluster import LocalCluster, LocalNode

SETTINGS = {"history.segment_size": "64kb"}
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
    prefix = (lambda _i: ["env", f"PYTHONPATH={tree_pythonpath(Path(tree))}"]) if tree else None
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


def payload_bytes(writes: int) -> float:
    """The floor: the mean bytes of key and value (the JSON body aiohttp sends) of the writes `write` makes."""
    return sum(len(f"key{i % 100}") + len(json.dumps({"n": i})) for i in range(writes)) / writes


def run(writes: int, clients: list[int], nodes: int, baseline: str | None) -> dict[str, Any]:
    """Per client count (and tree): each node's history bytes per write, on disk and archived, beside the
    payload each write carries; prints them and returns the results section."""
    trees: list[tuple[str, str | None]] = [("this tree", None)]
    if baseline:
        trees.append((f"baseline {baseline}", baseline))
    floor = payload_bytes(writes)
    rows: list[dict[str, Any]] = []
    for client_count in clients:
        for label, tree in trees:
            figures = measure(tree, writes, client_count, nodes)
            print(f"\n{label}, {client_count} client(s), {writes} writes: bytes per write per node")
            for node, (disk, kept) in figures.items():
                print(f"  {node:22} on disk {disk:7.1f}   archived {kept:7.1f}")
            disk_mean = statistics.fmean(d for d, _ in figures.values())
            kept_mean = statistics.fmean(k for _, k in figures.values())
            print(f"  {'mean':22} on disk {disk_mean:7.1f}   archived {kept_mean:7.1f}   payload {floor:.1f}")
            rows.append(
                {
                    "tree": label,
                    "clients": client_count,
                    "nodes": {node: {"on_disk": d, "archived": k} for node, (d, k) in figures.items()},
                    "on_disk_mean": disk_mean,
                    "archived_mean": kept_mean,
                }
            )
    return {"options": {"writes": writes, "nodes": nodes}, "payload_bytes": floor, "rows": rows}
