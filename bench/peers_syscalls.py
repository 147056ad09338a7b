"""The kernel's share of a write, counted rather than timed: the write-type syscalls (`syscw` of /proc/PID/io:
write, writev, pwrite; peer frames, HTTP answers, SQLite pages, history lines) of all 3 nodes per acknowledged
write, at 1 sequential client and at 64 clients. With `--ab-tree REV` the sidecar of git revision REV is
measured too, alternated with this tree on fresh clusters. Counts do not depend on how busy the machine is, so
this shows what a transport or persistence change does to the work per write even where timings are noise.

    flock /tmp/bench.lock .venv/bin/python bench/peers_syscalls.py [--rounds 2] [--ab-tree REV]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from peers import export_tree
from peers_harness import sequential, throughput
from peers_systems import OursSystem


def write_syscalls(system: OursSystem) -> int:
    total = 0
    for node in range(system.size):
        for line in Path(f"/proc/{system.pid(node)}/io").read_text().splitlines():
            if line.startswith("syscw:"):
                total += int(line.split()[1])
    return total


async def measure(source: tuple[str, Path] | None, writes: int, seconds: float) -> tuple[float, float, float]:
    """(syscalls per sequential write, per write at 64 clients, writes/s at 64 clients) on a fresh cluster."""
    with tempfile.TemporaryDirectory(prefix="coordinated-syscalls-") as workdir:
        system = OursSystem(3, source=source)
        try:
            await system.start(Path(workdir))
            leader = await system.wait_healthy()
            await sequential(system, leader, 30)
            before = write_syscalls(system)
            await sequential(system, leader, writes)
            per_sequential = (write_syscalls(system) - before) / writes
            before = write_syscalls(system)
            result = await throughput(system, 64, seconds)
            per_parallel = (write_syscalls(system) - before) / max(1, result["writes"])
            return per_sequential, per_parallel, result["rate"]
        finally:
            await system.stop()


async def run(rounds: int, writes: int, seconds: float, ab_tree: str | None) -> None:
    variants: list[tuple[str, tuple[str, Path] | None]] = [("this tree", None)]
    with tempfile.TemporaryDirectory(prefix="coordinated-syscalls-tree-") as trees:
        if ab_tree:
            tree = Path(trees) / "ab-tree"
            export_tree(ab_tree, tree)
            variants.append((ab_tree, (ab_tree, tree)))
        for index in range(rounds):
            for label, source in variants[index % len(variants) :] + variants[: index % len(variants)]:
                sequential_count, parallel_count, rate = await measure(source, writes, seconds)
                print(
                    f"round {index + 1} {label:12s} write syscalls per write: 1 client {sequential_count:.1f}, "
                    f"64 clients {parallel_count:.2f} ({rate:.0f} writes/s)",
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--writes", type=int, default=300, help="sequential writes per round")
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds of the 64-client phase")
    parser.add_argument("--ab-tree", help="also measure the sidecar of this git revision")
    args = parser.parse_args()
    asyncio.run(run(args.rounds, args.writes, args.seconds, args.ab_tree))


if __name__ == "__main__":
    main()
