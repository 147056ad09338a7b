"""Where a one-key write's CPU goes against the state size: 3 nodes seeded (as in bench/state_size.py) with
each `--keys` size in turn; py-spy samples the master and a follower (CPU only) while one client writes
sequentially to the master; then the heaviest frames, inclusive, side by side per size. A frame whose share
grows with the state is work proportional to the state on the write path.

    .venv/bin/python bench/state_size_profile.py [--keys 10 --keys 100000] [--writes 300]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from peers_harness import percentile
from peers_profile import collapsed, inclusive
from state_size import SeededOurs


async def profile_size(keys: int, writes: int, workdir: Path) -> dict[str, Counter[str]]:
    py_spy = str(Path(sys.executable).with_name("py-spy"))
    system = SeededOurs("branch", None, keys, 0)
    samples: dict[str, Counter[str]] = {}
    try:
        await system.start(workdir)
        leader = await system.wait_healthy(300)
        follower = next(i for i in range(3) if i != leader)
        for i in range(20):  # warm up
            await system.put(leader, f"warm{i}", i, timeout=10.0)
        recorders = []
        for role, node in (("master", leader), ("follower", follower)):
            out = workdir / f"{role}.txt"
            argv = [py_spy, "record", "-p", str(system.pid(node)), "-d", "600", "-r", "250", "-f", "raw"]
            argv += ["-o", str(out), "--nonblocking"]
            recorders.append((role, out, subprocess.Popen(argv, stdout=subprocess.DEVNULL)))
        await asyncio.sleep(1.0)  # py-spy attached
        latencies = []
        for i in range(writes):
            started = time.perf_counter()
            if not await system.put(leader, f"p{i % 100}", i, timeout=10.0):
                raise RuntimeError("write failed")
            latencies.append((time.perf_counter() - started) * 1000)
        print(f"{keys} keys: p50 {percentile(latencies, 50):.2f} ms, p99 {percentile(latencies, 99):.2f} ms")
        for role, out, process in recorders:
            process.send_signal(2)  # SIGINT: py-spy writes what it has
            await asyncio.to_thread(process.wait, 30)
            samples[role] = collapsed(out)
    finally:
        await system.stop()
    return samples


async def run(sizes: list[int], writes: int, top: int) -> None:
    with tempfile.TemporaryDirectory(prefix="state-size-profile-") as root:
        results = {keys: await profile_size(keys, writes, Path(root) / str(keys)) for keys in sizes}
    for role in ("master", "follower"):
        shares = {keys: dict(inclusive(results[keys][role], 400)) for keys in sizes}
        totals = {keys: sum(results[keys][role].values()) for keys in sizes}
        print(f"\n== {role}: CPU samples {', '.join(f'{keys} keys {totals[keys]}' for keys in sizes)}")
        print("   % of CPU samples (inclusive) per state size; sorted by the largest size")
        largest = sizes[-1]
        for frame, _share in sorted(shares[largest].items(), key=lambda item: -item[1])[:top]:
            row = "  ".join(f"{shares[keys].get(frame, 0.0):5.1f}%" for keys in sizes)
            print(f"{row}  {frame}")
        # Per write, in samples: what grows with the state.
        print(f"   samples per write, growth from {sizes[0]} to {largest} keys")
        per_write = {
            keys: {frame: share * totals[keys] / 100 / writes for frame, share in shares[keys].items()}
            for keys in sizes
        }
        growth = sorted(
            ((per_write[largest][frame] - per_write[sizes[0]].get(frame, 0.0), frame) for frame in per_write[largest]),
            reverse=True,
        )
        for delta, frame in growth[:top]:
            print(f"  +{delta:6.2f}  {frame}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, action="append", help="state sizes (default 10 and 100000)")
    parser.add_argument("--writes", type=int, default=300)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    asyncio.run(run(sorted(args.keys or [10, 100_000]), args.writes, args.top))


if __name__ == "__main__":
    main()
