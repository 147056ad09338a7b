"""Where a write's time goes in our sidecar: py-spy samples the master (and a follower) of a 3-node cluster
while clients write, then prints the heaviest frames, inclusive, by wall clock (idle included: a sequential
write is mostly waiting) and by CPU.

    .venv/bin/python -m bench profile [--clients 1] [--seconds 10] [--top 28] [--set SETTING=VALUE ...]
        [--sampler py-spy|cpu-time]

With `--sampler cpu-time` each node runs under bench/harness/cpu_sampler.py, which samples on the process's CPU time
rather than the wall clock (see its docstring for why that matters on two shared cores).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from bench.harness.measure import throughput
from bench.harness.systems import OursSystem


def collapsed(path: Path) -> Counter[str]:
    """py-spy's raw format: `frame;frame;... count` per line, root first."""
    stacks: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack:
            stacks[stack] += int(count)
    return stacks


def leaves(stacks: Counter[str], top: int) -> list[tuple[str, float]]:
    """Self time: the share of samples whose innermost frame is each function."""
    total = sum(stacks.values()) or 1
    per_frame: Counter[str] = Counter()
    for stack, count in stacks.items():
        per_frame[stack.rsplit(";", 1)[-1]] += count
    return [(frame, 100 * count / total) for frame, count in per_frame.most_common(top)]


def inclusive(stacks: Counter[str], top: int) -> list[tuple[str, float]]:
    total = sum(stacks.values()) or 1
    per_frame: Counter[str] = Counter()
    for stack, count in stacks.items():
        for frame in set(stack.split(";")):
            per_frame[frame] += count
    return [(frame, 100 * count / total) for frame, count in per_frame.most_common(top)]


def print_shares(title: str, shares: list[tuple[str, float]]) -> None:
    print(f"\n== {title}: % of samples")
    for frame, share in shares:
        print(f"{share:5.1f}%  {frame}")


async def profile_cpu_time(clients: int, seconds: float, workdir: Path, extra: dict[str, str], top: int) -> None:
    """Every node runs under bench/harness/cpu_sampler.py; the samples of the measured writes only (not the warm-up)."""
    sampler = Path(__file__).parents[1] / "harness" / "cpu_sampler.py"
    outputs = [workdir / f"cpu-samples-{index}.txt" for index in range(3)]
    system = OursSystem(3, extra=extra, wrap=lambda index: [sys.executable, str(sampler), str(outputs[index])])
    try:
        await system.start(workdir)
        leader = await system.wait_healthy()
        follower = next(i for i in range(3) if i != leader)
        await throughput(system, clients, 1.0)  # warm-up, not sampled
        for index in range(3):
            os.kill(system.pid(index), signal.SIGUSR1)
        result = await throughput(system, clients, seconds)
        for index in range(3):
            os.kill(system.pid(index), signal.SIGUSR2)
        await asyncio.sleep(1.0)
        print(f"{clients} client(s): {result['rate']:.1f} writes/s while sampling")
        for role, node in (("master", leader), ("follower", follower)):
            stacks = collapsed(outputs[node])
            print_shares(f"{role}, CPU time ({sum(stacks.values())} samples), inclusive", inclusive(stacks, top))
            print_shares(f"{role}, CPU time, self time (innermost frame)", leaves(stacks, top))
    finally:
        await system.stop()


async def profile(clients: int, seconds: float, workdir: Path, extra: dict[str, str], top: int = 28) -> None:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    system = OursSystem(3, extra=extra)
    try:
        await system.start(workdir)
        leader = await system.wait_healthy()
        follower = next(i for i in range(3) if i != leader)
        recorders = []
        for role, node in (("master", leader), ("follower", follower)):
            for mode in ("wall", "cpu"):
                out = workdir / f"{role}-{mode}.txt"
                argv = [py_spy, "record", "-p", str(system.pid(node)), "-d", str(int(seconds)), "-r", "200"]
                argv += ["-f", "raw", "-o", str(out), "--nonblocking"] + (["--idle"] if mode == "wall" else [])
                recorders.append((role, mode, out, subprocess.Popen(argv, stdout=subprocess.DEVNULL)))
        result = await throughput(system, clients, seconds)
        print(f"{clients} client(s): {result['rate']:.1f} writes/s while sampling")
        for role, mode, out, process in recorders:
            await asyncio.to_thread(process.wait, 30)
            stacks = collapsed(out)
            print_shares(
                f"{role}, {'wall clock (idle included)' if mode == 'wall' else 'CPU only'}", inclusive(stacks, top)
            )
            if mode == "cpu":
                print_shares(f"{role}, CPU only, self time (innermost frame)", leaves(stacks, top))
    finally:
        await system.stop()


def main(clients: int, seconds: float, top: int, settings: dict[str, str], sampler: str) -> None:
    run = profile_cpu_time if sampler == "cpu-time" else profile
    with tempfile.TemporaryDirectory(prefix="coordinated-profile-") as workdir:
        asyncio.run(run(clients, seconds, Path(workdir), settings, top))
