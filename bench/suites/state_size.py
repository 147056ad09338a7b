"""Write latency and throughput against the size of the stored state: 3 nodes, states of 10 keys, 10,000
keys, 100,000 keys and about 10 MB (ten ~900 KB values plus 5,000 small keys); etcd at 100,000 keys in the
same run; each node's RSS after the writes, checked at 100,000 keys against the memory budget per node
(`RSS_BUDGET_MB`). The report ends with each system's p50 against its own 10-key p50 and,
at 100,000 keys, against etcd's (the goals: at most 1.5x both).

`--source NAME=DIR` runs the nodes from another checkout's source tree (its `core`, `sidecar` and `tools` put
first on PYTHONPATH), e.g. main's, exported with `git archive main | tar -x -C DIR`: before and after
figures in one run, interleaved per state size. The states are seeded into the stopped nodes through their
own persistence layer (bench/suites/state_seed.py); then every write is a one-key write of a fresh value.

flock /tmp/bench.lock .venv/bin/python -m bench state-size --source main=/tmp/main-src [--writes 200]
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from bench.harness.etcd import EtcdSystem
from bench.harness.local import rss_mb
from bench.harness.machine import conditions
from bench.harness.measure import sequential, throughput
from bench.harness.systems import OursSystem, System, tree_pythonpath
from coordinated.tools.localcluster import LocalCluster

SIZES: dict[str, tuple[int, int]] = {  # name -> (small keys, ~900 KB values)
    "10 keys": (10, 0),
    "10,000 keys": (10_000, 0),
    "100,000 keys": (100_000, 0),
    "10 MB": (5_000, 10),
}
BENCH = Path(__file__).resolve().parent
# The memory budget of one node holding 100,000 small keys (~40-byte values), RSS after the writes: a node's
# own baseline (about 50 MB: Python, aiohttp, SQLite), the state's persistent maps (about 55 MB), room for a
# second copy while a full state is received or loaded, and the bounded rings.
RSS_BUDGET_MB = 192
BUDGET_STATE = "100,000 keys"


class SeededOurs(OursSystem):
    """Three sidecars of one source tree, seeded with a state of the given size before they are measured; the
    rest (writes, leader, PIDs, restart, stop) is `OursSystem`'s."""

    def __init__(self, name: str, tree: Path | None, keys: int, large: int, sessions: int = 0) -> None:
        super().__init__(3, source=(name, tree) if tree is not None else None)
        self.label = f"coordinated ({name})"
        self.keys, self.large, self.sessions = keys, large, sessions
        self.health_timeout = 150.0

    async def start(self, workdir: Path) -> None:
        self.cluster = LocalCluster(workdir, settings={}, max_nodes=3, argv_prefix=self.argv_prefix())
        nodes = await asyncio.to_thread(self.cluster.bootstrap, 3, 60)
        self.names = [node.name for node in nodes]
        self.ids = {node.node_id(): index for index, node in enumerate(nodes)}
        await asyncio.to_thread(self.cluster.stop_all, True)
        argv = [sys.executable, str(BENCH / "state_seed.py"), "--keys", str(self.keys), "--large", str(self.large)]
        argv += ["--sessions", str(self.sessions)]
        argv += [str(node.data_dir) for node in nodes]
        env = dict(os.environ)
        if self.source is not None:
            env["PYTHONPATH"] = tree_pythonpath(self.source[1])
        subprocess.run(argv, check=True, env=env, capture_output=True, timeout=600)
        for name in self.names:
            self.cluster.start(name)
        for node in nodes:
            await asyncio.to_thread(self.cluster.wait_http, node, 120.0)
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        await self.wait_healthy(self.health_timeout)

    def state_keys(self) -> int:
        _, state = self._node(0).get("/_cluster/state", timeout=60)
        return len(state["metadata"]["kv"])


async def seed_etcd(system: EtcdSystem, keys: int, clients: int = 64) -> None:
    queue = iter(range(keys))

    async def client() -> None:
        for i in queue:
            if not await system.put(i % system.size, f"seed-{i:06d}", i, timeout=30):
                raise RuntimeError("etcd seeding failed")

    await asyncio.gather(*(client() for _ in range(clients)))


async def measure(system: System, writes: int, seconds: float, clients: int) -> dict[str, Any]:
    await system.wait_healthy(300)
    figures: dict[str, Any] = dict(await sequential(system, 0, writes))
    figures["rate16"] = (await throughput(system, clients, seconds))["rate"]
    figures["rss_mb"] = [round(rss_mb(system.pid(i)), 1) for i in range(system.size)]
    return figures


async def run(
    sources: Sequence[tuple[str, Path]], writes: int, seconds: float, clients: int, only: Sequence[str], etcd: bool
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    workroot = Path(tempfile.mkdtemp(prefix="state-size-"))
    variants: list[tuple[str, Path | None]] = [*sources, ("branch", None)]
    for size_name, (keys, large) in SIZES.items():
        if only and size_name not in only:
            continue
        systems: list[System] = [SeededOurs(name, source, keys, large) for name, source in variants]
        if keys == 100_000 and etcd:
            systems.append(EtcdSystem(3))
        for index, system in enumerate(systems):
            workdir = workroot / f"{size_name.replace(' ', '').replace(',', '')}-{index}"
            before = conditions(workroot)
            started = time.perf_counter()
            figures: dict[str, Any]
            try:
                await system.start(workdir)
                if isinstance(system, EtcdSystem):
                    await seed_etcd(system, keys)
                keys_before = await asyncio.to_thread(system.state_keys) if isinstance(system, SeededOurs) else keys
                figures = await measure(system, writes, seconds, clients)
                figures["keys"] = keys_before
            except (TimeoutError, RuntimeError, OSError) as error:
                # Reported, not hidden: a system that cannot serve this state is a result too.
                figures = {"failed": f"{type(error).__name__}: {error} (logs in {workdir})"}
            finally:
                await system.stop()
            row = {"state": size_name, "system": system.label, **figures, "conditions": before}
            row["phase_s"] = round(time.perf_counter() - started, 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def report(rows: list[dict[str, Any]]) -> str:
    lines = ["| state | system | keys | p50 ms | p99 ms | 16 clients w/s | RSS MB (3 nodes) | fsync p50 ms | load |"]
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        cond = row["conditions"]
        if "failed" in row:
            lines.append(f"| {row['state']} | {row['system']} | - | {row['failed']} | | | | | |")
            continue
        lines.append(
            f"| {row['state']} | {row['system']} | {row.get('keys', '-')} | {row['p50']:.2f} | {row['p99']:.2f} | "
            f"{row['rate16']:.0f} | {', '.join(f'{v:.0f}' for v in row['rss_mb'])} | {cond['fsync_p50']:.2f} | "
            f"{cond['load1']:.1f} |"
        )
    lines.append("")
    lines.extend(ratios(rows))
    return "\n".join(lines)


def ratios(rows: list[dict[str, Any]]) -> list[str]:
    """Each system's p50 per state size against its own 10-key p50, and at 100,000 keys against etcd's; the
    RSS of each node at 100,000 keys against the budget."""
    measured = [row for row in rows if "failed" not in row]
    etcd = next((row for row in measured if row["system"].startswith("etcd")), None)
    lines = []
    for system in dict.fromkeys(row["system"] for row in measured if not row["system"].startswith("etcd")):
        own = {row["state"]: row for row in measured if row["system"] == system}
        base = own.get("10 keys")
        parts = [
            f"{state} {row['p50'] / base['p50']:.2f}x" for state, row in own.items() if base and state != "10 keys"
        ]
        line = f"{system}: p50 vs its 10-key p50: {', '.join(parts) or '-'}"
        at_budget = own.get(BUDGET_STATE)
        if at_budget is not None:
            if etcd is not None:
                line += f"; at {BUDGET_STATE} vs etcd: p50 {at_budget['p50'] / etcd['p50']:.2f}x"
                line += f", 16-client throughput {at_budget['rate16'] / etcd['rate16']:.2f}x"
            over = [rss for rss in at_budget["rss_mb"] if rss > RSS_BUDGET_MB]
            line += f"; RSS at {BUDGET_STATE} max {max(at_budget['rss_mb']):.0f} MB, budget {RSS_BUDGET_MB} MB"
            line += f" ({'OVER' if over else 'within'})"
        lines.append(line)
    return lines


def main(
    sources: Sequence[tuple[str, Path]], writes: int, seconds: float, clients: int, only: Sequence[str], etcd: bool
) -> None:
    rows = asyncio.run(run(sources, writes, seconds, clients, only, etcd))
    print(report(rows))
