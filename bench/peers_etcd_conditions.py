"""etcd 3n alone under chosen machine conditions: what slows it down on this machine?

    .venv/bin/python bench/peers_etcd_conditions.py [disk] [tmpfs] [hog] [hog2] [ioload] [hog2-ioload] ...

For each named condition, a fresh 3-member etcd cluster: the fsync probe and load before; 100 sequential
writes (the first writes into a fresh WAL), 300 more (timed, with CPU per write), 64 clients for 3 s; the
probe again after. Conditions: data dirs on the disk (`disk`) or on tmpfs (`tmpfs`, /dev/shm); one busy loop
pinned to a core (`hog`); two busy loops (`hog2`); a concurrent 64 KiB write + fdatasync loop on the same
disk (`ioload`); and combinations joined by "-". Every helper process is stopped by PID; prints one line per
condition and asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import sys
import tempfile
from pathlib import Path

from peers_env import HOG_MAX_S, CpuHog, CpuMeter, conditions
from peers_etcd import EtcdSystem
from peers_harness import sequential, throughput
from peers_procs import spawn, stop

BUSY = f"import time\nend = time.monotonic() + {HOG_MAX_S}\nwhile time.monotonic() < end:\n    pass\n"
FSYNC_WRITER = """import os, sys, time
fd = os.open(os.path.join(sys.argv[1], "io-load"), os.O_WRONLY | os.O_CREAT, 0o600)
block, end = os.urandom(65536), time.monotonic() + {limit}
while time.monotonic() < end:
    os.write(fd, block)
    os.fdatasync(fd)
    if os.lseek(fd, 0, os.SEEK_CUR) > 64 << 20:
        os.lseek(fd, 0, os.SEEK_SET)
""".replace("{limit}", str(HOG_MAX_S))


async def run(condition: str, base: Path) -> None:
    parts = set(condition.split("-"))
    parent = Path("/dev/shm") if "tmpfs" in parts else base
    workdir = Path(tempfile.mkdtemp(prefix="etcd-conditions-", dir=parent))
    system = EtcdSystem(3)
    helpers = []
    try:
        await system.start(workdir)
        leader = await system.wait_healthy()
        pids = [system.pid(i) for i in range(system.size)]
        before = conditions(workdir)
        with contextlib.ExitStack() as stack:
            hog = stack.enter_context(CpuHog(workdir)) if "hog" in parts else None
            if "hog2" in parts:
                helpers += [spawn([sys.executable, "-c", BUSY], workdir / f"busy{i}.log") for i in range(2)]
            if "ioload" in parts:
                helpers.append(spawn([sys.executable, "-c", FSYNC_WRITER, str(workdir)], workdir / "io.log"))
            first = await sequential(system, leader, 100)
            with CpuMeter(pids, hog.pid if hog else None) as meter:
                seq = await sequential(system, leader, 300)
            seq_cpu = meter.per_write(300)
            with CpuMeter(pids, hog.pid if hog else None) as meter:
                tput = await throughput(system, 64, 3.0)
            tput_cpu = meter.per_write(int(tput["writes"]))
            for helper in helpers:
                stop(helper)
        after = conditions(workdir)
        print(
            f"{condition:12s} fsync p50 {before['fsync_p50']:5.2f} -> {after['fsync_p50']:5.2f} ms, "
            f"load {before['load1']:4.1f} | first 100 p50 {first['p50']:5.2f} ms | seq p50 {seq['p50']:5.2f} "
            f"p99 {seq['p99']:6.2f} ms, cpu/write {seq_cpu['system_ms']:.2f} + harness {seq_cpu['harness_ms']:.2f} "
            f"ms | 64 clients {tput['rate']:6.0f}/s, cpu/write {tput_cpu['system_ms']:.2f} + harness "
            f"{tput_cpu['harness_ms']:.2f} ms, others {tput_cpu['others_cores']:.1f} cores",
            flush=True,
        )
    finally:
        for helper in helpers:
            stop(helper)
        await system.stop()
        shutil.rmtree(workdir, ignore_errors=True)


async def main_async(names: list[str], workdir: str | None) -> None:
    base = Path(tempfile.mkdtemp(prefix="coordinated-etcd-conditions-", dir=workdir))
    try:
        for name in names:
            await run(name, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("conditions", nargs="*", default=["disk", "hog", "ioload", "tmpfs"])
    parser.add_argument("--workdir", default=None, help="parent of the data dirs on disk (default: the temp dir)")
    args = parser.parse_args()
    known = {"disk", "tmpfs", "hog", "hog2", "ioload"}
    for name in args.conditions:
        if not set(name.split("-")) <= known:
            parser.error(f"unknown condition {name!r}: combine {', '.join(sorted(known))} with '-'")
    asyncio.run(main_async(args.conditions, args.workdir))


if __name__ == "__main__":
    main()
