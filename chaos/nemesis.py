"""A seeded random fault schedule against real processes: kill -9 and restart, SIGSTOP/SIGCONT, partitions
(majority/minority, isolated master, bridge) and slow links. Every fault is healed before the next."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from dataclasses import dataclass

from chaos import netns
from coordinated.tools.localcluster import LocalCluster, LocalNode

FAULTS = ("kill", "pause", "partition-majority", "partition-master", "partition-bridge", "slow")


@dataclass
class Fault:
    kind: str
    detail: str
    started: float
    ended: float = 0.0


def master_index(cluster: LocalCluster, names: list[str]) -> int | None:
    master = cluster.master()
    return names.index(master.name) if master is not None else None


def partition(groups: list[list[int]]) -> None:
    for i, left in enumerate(groups):
        for right in groups[i + 1 :]:
            for a in left:
                for b in right:
                    netns.block(a, b)


async def inject(kind: str, rng: random.Random, cluster: LocalCluster, names: list[str]) -> str:
    """Apply one fault; return what was done (the matching `heal` undoes it)."""
    count = len(names)
    master = await asyncio.to_thread(master_index, cluster, names)
    target = master if master is not None and rng.random() < 0.5 else rng.randrange(count)
    nodes = list(range(count))
    if kind == "kill":
        cluster.kill(cluster.nodes[names[target]], signal.SIGKILL)
        return f"kill -9 {names[target]}"
    if kind == "pause":
        os.kill(cluster.nodes[names[target]].pid or 0, signal.SIGSTOP)
        return f"SIGSTOP {names[target]}"
    if kind == "partition-master":
        isolated = master if master is not None else target
        partition([[isolated], [n for n in nodes if n != isolated]])
        return f"isolate {names[isolated]}"
    if kind == "partition-bridge":
        rng.shuffle(nodes)
        bridge, left, right = nodes[0], nodes[1 : 1 + (count - 1) // 2], nodes[1 + (count - 1) // 2 :]
        partition([left, right])  # the bridge node keeps both sides
        return f"bridge {names[bridge]} between {[names[i] for i in left]} and {[names[i] for i in right]}"
    if kind == "slow":
        victims = rng.sample(nodes, rng.randint(1, 2))
        how = [netns.slow(index, rng.choice((50, 100, 200)), 20) for index in victims]
        return f"slow links {[names[i] for i in victims]} ({how[0]})"
    rng.shuffle(nodes)
    minority = nodes[: (count - 1) // 2]
    partition([minority, nodes[len(minority) :]])
    return f"majority/minority: {[names[i] for i in minority]} cut off"


async def heal(cluster: LocalCluster, names: list[str], killed: str | None, crashes: list[str]) -> None:
    netns.heal(len(names))
    for name in names:
        node: LocalNode = cluster.nodes[name]
        if node.alive():
            os.kill(node.pid or 0, signal.SIGCONT)
            continue
        if name != killed:
            crashes.append(f"{name} exited by itself (code {node.process.returncode if node.process else '?'})")
        cluster.start(name)
        await asyncio.to_thread(cluster.wait_http, node, 30.0)


async def run_nemesis(
    seed: int,
    cluster: LocalCluster,
    names: list[str],
    until: float,
    log: list[Fault],
    crashes: list[str],
    stop: asyncio.Event,
) -> None:
    rng = random.Random(seed)
    while time.monotonic() < until - 8:
        await asyncio.sleep(rng.uniform(2.0, 5.0))  # a quiet spell, so the cluster can recover and make progress
        kind = rng.choice(FAULTS)
        fault = Fault(kind, "", time.monotonic())
        killed = None
        try:
            fault.detail = await inject(kind, rng, cluster, names)
            killed = fault.detail.removeprefix("kill -9 ") if kind == "kill" else None
            print(f"[nemesis] {fault.detail}", flush=True)
            await asyncio.sleep(rng.uniform(2.0, 6.0))
        finally:
            await heal(cluster, names, killed, crashes)
            fault.ended = time.monotonic()
            log.append(fault)
    stop.set()
