"""Soak: 3 local nodes with a small history retention under steady writes, for a bounded time.

    flock /tmp/bench.lock .venv/bin/python bench/soak.py --minutes 10 [--rate 50] [--out DIR] [--audit-every 5]

Every minute it records each node's data directory and history size on disk, RSS, open file descriptors, and
its archive lag where the node reports one (`coordinated_history_archive_lag_seconds`, once an archive exists),
and draws them (DIR/soak.png, the samples in DIR/soak.json). With `--audit-every M` an incremental audit
(`coordinated audit --checkpoint`) runs every M minutes, so that the chain of audits reads every event before
retention deletes it; one more runs at the end.

It fails (exit 1) when, past the warm-up, disk, RSS or descriptors keep growing (the second half's peak above the
first half's by more than the tolerance), when an audit reports a violation, when a node recorded a
`history_lost` event, when the audits did not cover every event the nodes wrote (with `--audit-every`), or when
a key does not read back as its last acknowledged value. Everything it starts it stops, by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp

from coordinated.sidecar.events.history_segments import list_segments
from coordinated.tools.localcluster import FAST_SETTINGS, LocalCluster, LocalNode

RETENTION = {
    "history.retention.max_size": "2mb",
    "history.segment_size": "256kb",
}
KEYS = 200  # a bounded key space: the state itself does not grow
WARM_UP_S = 120.0
# How much a figure may grow from the first half of the run (after warm-up) to the second.
TOLERANCE = {"disk_mb": (0.10, 1.0), "history_mb": (0.10, 0.6), "rss_mb": (0.15, 8.0), "fds": (0.0, 4.0)}


@dataclass
class Sample:
    minute: float
    node: str
    disk_mb: float  # the whole data directory
    history_mb: float
    rss_mb: float
    fds: int
    archive_lag_s: float | None


def du(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += (Path(root) / name).stat().st_size
            except FileNotFoundError:
                continue
    return total


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def archive_lag(node: LocalNode) -> float | None:
    """The node's archive lag in seconds, where it reports one (the hook for the archive's metric)."""
    try:
        with urllib.request.urlopen(f"{node.url}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("coordinated_history_archive_lag_seconds"):
            return float(line.split()[-1])
    return None


def sample(node: LocalNode, minute: float) -> Sample:
    assert node.process is not None
    pid = node.process.pid
    return Sample(
        minute=round(minute, 2),
        node=node.name,
        disk_mb=du(node.data_dir) / 1e6,
        history_mb=du(node.data_dir / "history") / 1e6,
        rss_mb=rss_mb(pid),
        fds=len(os.listdir(f"/proc/{pid}/fd")),
        archive_lag_s=archive_lag(node),
    )


class Writer:
    """Steady one-key writes at `rate` per second, remembering each key's last acknowledged value."""

    def __init__(self, nodes: list[LocalNode], rate: float) -> None:
        self.nodes = nodes
        self.rate = rate
        self.acknowledged: dict[str, int] = {}
        self.failures = 0
        self.writes = 0
        self._stop = asyncio.Event()
        self._go = asyncio.Event()
        self._go.set()
        self._idle = asyncio.Event()

    async def paused(self) -> None:
        """Stop writing until `resume`, once the write under way is answered."""
        self._go.clear()
        await self._idle.wait()

    def resume(self) -> None:
        self._go.set()

    async def run(self) -> None:
        interval = 1.0 / self.rate
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            next_at = time.monotonic()
            while not self._stop.is_set():
                if not self._go.is_set():
                    self._idle.set()
                    await self._go.wait()
                    self._idle.clear()
                    next_at = time.monotonic()
                key = f"soak/{self.writes % KEYS}"
                node = self.nodes[self.writes % len(self.nodes)]
                value = self.writes
                try:
                    async with session.put(f"{node.url}/_cluster/metadata/{key}", json={"n": value}) as response:
                        await response.read()
                        if response.status == 200:
                            self.acknowledged[key] = value
                        else:
                            self.failures += 1
                except (aiohttp.ClientError, TimeoutError):
                    self.failures += 1  # unknown outcome: the read-back below accepts the key's last two values
                self.writes += 1
                next_at += interval
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()
        self._go.set()


def grew(samples: list[Sample], field: str, start_s: float) -> list[str]:
    """Per node: the figure's peak in the second half (after warm-up) against the first half's."""
    problems = []
    relative, absolute = TOLERANCE[field]
    for node in sorted({s.node for s in samples}):
        mine = [s for s in samples if s.node == node and s.minute * 60 >= start_s]
        if len(mine) < 4:
            continue
        half = len(mine) // 2
        first = max(getattr(s, field) for s in mine[:half])
        second = max(getattr(s, field) for s in mine[half:])
        if second > first * (1 + relative) + absolute:
            problems.append(f"{node}: {field} grew from {first:.1f} to {second:.1f}")
    return problems


def snapshot(dirs: list[Path], into: Path) -> list[Path]:
    """The nodes' segment files at one moment, in folders that keep their paths from one audit to the next: the
    nodes compress and delete segments while an audit reads, and a listing must hold still. Closed segments
    are linked, the open (plain) ones copied, so that later appends stay out."""
    shutil.rmtree(into, ignore_errors=True)
    out = []
    for folder in dirs:
        target = into / folder.parent.name
        target.mkdir(parents=True)
        for segment in list_segments(folder):  # one file per segment, the compressed one where both exist
            for path in (segment.path, segment.path.with_name(segment.path.name + ".zst")):
                try:
                    if path.name.endswith(".zst"):
                        (target / path.name).hardlink_to(path)
                    else:
                        shutil.copyfile(path, target / path.name)
                    break
                except FileNotFoundError:
                    continue  # compressed since the listing (try that), or deleted
        out.append(target)
    return out


def audit(dirs: list[Path], report: Path, checkpoint: Path | None) -> dict[str, Any]:
    command = [sys.executable, "-m", "coordinated.cli", "audit", *map(str, dirs), "--report-dir", str(report)]
    command += ["--no-html", "--spark-master", "local[1]"]
    if checkpoint is not None:
        command += ["--checkpoint", str(checkpoint)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"the audit could not run (exit {done.returncode}): {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads((report / "audit-report.json").read_text())
    return result


def lost_events(nodes: list[LocalNode]) -> list[str]:
    """`history_lost` events in what the nodes still hold."""
    found = []
    for node in nodes:
        with urllib.request.urlopen(f"{node.url}/_history?after_seq=0", timeout=60) as response:
            for line in response:
                event = json.loads(line)
                if event.get("type") == "history_lost":
                    found.append(f"{node.name}: {event.get('reason')}")
    return found


def chart(samples: list[Sample], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fields = [("disk_mb", "data dir (MB)"), ("history_mb", "history (MB)"), ("rss_mb", "RSS (MB)"), ("fds", "open fds")]
    if any(s.archive_lag_s is not None for s in samples):
        fields.append(("archive_lag_s", "archive lag (s)"))
    figure, axes = plt.subplots(len(fields), 1, figsize=(8, 2.2 * len(fields)), sharex=True)
    for axis, (field, label) in zip(axes, fields, strict=True):
        for node in sorted({s.node for s in samples}):
            mine = [s for s in samples if s.node == node and getattr(s, field) is not None]
            axis.plot([s.minute for s in mine], [getattr(s, field) for s in mine], label=node, marker=".")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
    axes[0].legend(loc="upper left", fontsize="small")
    axes[-1].set_xlabel("minutes")
    figure.tight_layout()
    figure.savefig(path, dpi=100)


async def soak(args: argparse.Namespace, cluster: LocalCluster, out: Path) -> list[str]:
    nodes = cluster.bootstrap(3, timeout=60)
    writer = Writer(nodes, args.rate)
    task = asyncio.get_running_loop().create_task(writer.run())
    samples: list[Sample] = []
    reports: list[dict[str, Any]] = []
    checkpoint = out / "checkpoint.json" if args.audit_every else None
    dirs = [n.data_dir / "history" for n in nodes]
    started = time.monotonic()
    next_audit = args.audit_every * 60 if args.audit_every else None
    next_sample = 0.0
    try:
        while (elapsed := time.monotonic() - started) < args.minutes * 60:
            if elapsed >= next_sample:
                samples.extend(sample(n, elapsed / 60) for n in nodes)
                next_sample += args.sample_s
                latest = samples[-3:]
                print(
                    f"{elapsed / 60:5.1f} min  writes {writer.writes}  "
                    + "  ".join(f"{s.node}: {s.disk_mb:.1f}MB {s.rss_mb:.0f}MB-rss {s.fds}fd" for s in latest),
                    flush=True,
                )
            if next_audit is not None and elapsed >= next_audit:
                # Writes pause while the snapshot is taken: every node then holds the same writes, whole
                # (a node read a moment after another would show commits whose acks the other has not yet).
                await writer.paused()
                await asyncio.sleep(1.0)
                taken = snapshot(dirs, out / "snapshot")
                writer.resume()
                reports.append(await asyncio.to_thread(audit, taken, out / f"audit-{len(reports)}", checkpoint))
                next_audit += args.audit_every * 60
            await asyncio.sleep(1.0)
    finally:
        writer.stop()
        await task
    samples.extend(sample(n, (time.monotonic() - started) / 60) for n in nodes)
    await asyncio.sleep(2.0)
    taken = snapshot(dirs, out / "snapshot")
    reports.append(await asyncio.to_thread(audit, taken, out / f"audit-{len(reports)}", checkpoint))
    problems = []
    for field in TOLERANCE:
        problems += grew(samples, field, WARM_UP_S)
    for i, report in enumerate(reports):
        for v in report["violations"]:
            problems.append(f"audit {i}: {v['invariant']}: {v['detail']}")
    problems += [f"history lost: {e}" for e in lost_events(nodes)]
    if checkpoint is not None:
        total = sum(last_seq(n) for n in nodes)
        audited = sum(r["events"] for r in reports)
        print(f"the audits read {audited} of the {total} events the nodes wrote")
        if audited < total:
            problems.append(f"the audits read {audited} events, the nodes wrote {total}: some were deleted unread")
    problems += await read_back(nodes[0], writer)
    (out / "soak.json").write_text(
        json.dumps({"samples": [asdict(s) for s in samples], "writes": writer.writes, "failures": writer.failures})
    )
    chart(samples, out / "soak.png")
    print(
        f"writes {writer.writes} (failed or unknown {writer.failures}); audits {len(reports)}; chart {out / 'soak.png'}"
    )
    return problems


def last_seq(node: LocalNode) -> int:
    with urllib.request.urlopen(f"{node.url}/_history?after_seq=0", timeout=60) as response:
        seq = 0
        for line in response:
            seq = max(seq, int(json.loads(line)["seq"]))
    return seq


async def read_back(node: LocalNode, writer: Writer) -> list[str]:
    """Every key reads back as its last acknowledged value (or a later unacknowledged one)."""
    problems = []
    async with aiohttp.ClientSession() as session:
        for key, value in writer.acknowledged.items():
            async with session.get(f"{node.url}/_cluster/metadata/{key}") as response:
                body = await response.json()
            found = body.get("value", body) if isinstance(body, dict) else body
            number = found.get("n") if isinstance(found, dict) else None
            if not isinstance(number, int) or number < value:
                problems.append(f"{key}: read {found!r}, last acknowledged {value}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, required=True)
    parser.add_argument("--rate", type=float, default=50.0, help="writes per second (default 50)")
    parser.add_argument("--sample-s", type=float, default=60.0, help="seconds between samples (default 60)")
    parser.add_argument("--audit-every", type=float, default=0.0, help="minutes between incremental audits")
    parser.add_argument("--out", type=Path, default=None, help="where the chart, samples and reports go")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="soak-out-"))
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="soak-"))
    cluster = LocalCluster(workdir, settings={**FAST_SETTINGS, **RETENTION})
    try:
        problems = asyncio.run(soak(args, cluster, out))
    finally:
        cluster.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)
    for problem in problems:
        print(f"FAIL: {problem}")
    print("soak: " + ("FAILED" if problems else "ok"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
