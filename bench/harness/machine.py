"""The machine's conditions around each measured phase, so that a slow run can be told from a slow system.

- `fsync_probe`: 4 KiB write + fdatasync in a loop, in the data dirs' own filesystem (the cost every
  fsyncing system pays per durable write, and what a busy shared disk inflates);
- `CpuMeter`: CPU time (utime + stime from /proc/PID/stat, all threads) of the system's processes, of this
  harness and of the CPU hog, and the busy time of the whole machine from /proc/stat, so that the CPU used by
  *other* processes during the phase is known too;
- `CpuHog`: an optional bounded busy loop on one core, a subprocess stopped by PID at the end of its phase.
"""

from __future__ import annotations

import os
import resource
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness.procs import spawn, stop

CLK_TCK = os.sysconf("SC_CLK_TCK")
HOG = " +hog"  # the label suffix of the phases measured with a CpuHog running
HOG_MAX_S = 900  # the hog exits by itself after this long even if the harness dies without stopping it


def fsync_probe(directory: Path, writes: int = 100) -> dict[str, float]:
    """p50 / p99 ms of a 4 KiB write + fdatasync at successive offsets of a preallocated file in `directory`
    (as etcd writes its preallocated WAL segments): mostly the virtual disk's flush, which other tenants'
    I/O slows down."""
    path = directory / "fsync-probe"
    block = os.urandom(4096)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    latencies = []
    try:
        os.posix_fallocate(fd, 0, 4096 * writes)
        os.fsync(fd)
        for _ in range(writes):
            started = time.perf_counter()
            os.write(fd, block)
            os.fdatasync(fd)
            latencies.append((time.perf_counter() - started) * 1000)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    latencies.sort()
    return {"p50": statistics.median(latencies), "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]}


def process_cpu_s(pid: int) -> float:
    """utime + stime of a live process (all its threads), in seconds; 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of proc(5), after "pid (comm)"


def machine_busy_s() -> float:
    """CPU seconds spent not idle by all CPUs since boot (/proc/stat; iowait counts as idle)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (values + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def pressure(resource_name: str) -> float:
    """% of the last 10 s in which some runnable task waited for `resource_name` (Linux PSI; nan without it).
    Unlike the load average, which also counts tasks asleep on disk, this says whether CPU was short."""
    try:
        first = Path(f"/proc/pressure/{resource_name}").read_text().splitlines()[0]
    except OSError:
        return float("nan")
    return float(first.split()[1].removeprefix("avg10="))


def harness_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process (gRPC's too)
    return usage.ru_utime + usage.ru_stime


def conditions(directory: Path) -> dict[str, float]:
    """fsync latency, load average and CPU / IO pressure, at one moment."""
    probe = fsync_probe(directory)
    load1, load5, _ = os.getloadavg()
    return {
        "fsync_p50": probe["p50"],
        "fsync_p99": probe["p99"],
        "load1": load1,
        "load5": load5,
        "cpu_pressure": pressure("cpu"),
        "io_pressure": pressure("io"),
    }


@dataclass
class CpuMeter:
    """CPU used during one measured interval by the system's processes, the harness, the hog and the rest."""

    pids: list[int]
    hog_pid: int | None = None
    started: dict[str, float] = field(default_factory=dict)

    def _sample(self) -> dict[str, float]:
        per_pid = {f"pid:{pid}": process_cpu_s(pid) for pid in self.pids}
        return {
            **per_pid,
            "wall": time.monotonic(),
            "system": sum(per_pid.values()),
            "harness": harness_cpu_s(),
            "hog": process_cpu_s(self.hog_pid) if self.hog_pid else 0.0,
            "machine": machine_busy_s(),
        }

    def __enter__(self) -> CpuMeter:
        self.started = self._sample()
        return self

    def __exit__(self, *_: Any) -> None:
        end = self._sample()
        self.delta = {key: end[key] - self.started[key] for key in end}

    def per_write(self, writes: int, master_pid: int | None = None) -> dict[str, float]:
        """ms of CPU per acknowledged write (system, harness), and the other processes' load in cores. With
        `master_pid`, also the master's and the mean follower's ms per write (`master_ms`, `follower_ms`)."""
        d = self.delta
        others = max(0.0, d["machine"] - d["system"] - d["harness"] - d["hog"])
        per = 1000 / writes if writes else float("nan")
        out = {
            "system_ms": d["system"] * per,
            "harness_ms": d["harness"] * per,
            "others_cores": others / d["wall"] if d["wall"] > 0 else float("nan"),
        }
        followers = [d[f"pid:{pid}"] for pid in self.pids if pid != master_pid]
        if master_pid is not None and master_pid in self.pids and followers:
            out["master_ms"] = d[f"pid:{master_pid}"] * per
            out["follower_ms"] = sum(followers) / len(followers) * per
        return out


class CpuHog:
    """A busy loop on one core (pinned to the last CPU), in its own process, stopped by PID."""

    CODE = f"import os, time\nos.sched_setaffinity(0, {{os.cpu_count() - 1}})\nend = time.monotonic() + {HOG_MAX_S}\n"
    CODE += "while time.monotonic() < end:\n    pass\n"

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.process: Any = None

    def __enter__(self) -> CpuHog:
        self.process = spawn([sys.executable, "-c", self.CODE], self.log_dir / "cpu-hog.log")
        return self

    @property
    def pid(self) -> int:
        return int(self.process.pid)

    def __exit__(self, *_: Any) -> None:
        stop(self.process)
