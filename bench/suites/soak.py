"""Soak: 3 local nodes with a small history retention and a history archive under steady writes, for a bounded time.

    .venv/bin/python -m bench soak --minutes 40 [--rate 50] [--out DIR] [--audit-every 10] [--driver-memory 2g]

The archive is a local S3-compatible server (`coordinated.tools.s3server`, built by `scripts/install-tools.sh`).
Every minute it records each node's data directory and history size on disk, RSS, open file descriptors, and
its archive lag (`coordinated_archive_pending_segments` and `coordinated_archive_oldest_pending_age_seconds`),
and draws them (DIR/soak.png, the samples in DIR/soak.json, both rewritten at every sample). The archive is
audited incrementally, as the operator's audit CronJob does it (`coordinated audit s3://archive/soak --checkpoint
s3://archive/soak/_audit/...`, read through Spark's s3a://): every `--audit-every` minutes, and once more at the
end, after the nodes stopped gracefully (each archives its last segment then). Each audit's stdout, stderr and
report go to DIR/audit-N/attempt-K/ as it runs; its verdict comes from its report (see `soak_audit`), and one
that did not complete is run once more.

It fails (exit 1) when a node's history is ever above its bound (`history.retention.max_size` plus the one open
segment that may fill before the next cut), when, past the warm-up, the rest of the data directory (the state
store), RSS or descriptors keep growing (the second half's peak above the first half's by more than the
tolerance), when an audit reports a violation, when an audit did not complete twice
in a row, when an event the nodes wrote is neither in the archive nor on a node's disk, when a node recorded a
`history_lost` event, when the audits' checkpoint does not reach every node's last archived event, or when a key
does not read back as its last acknowledged value. The end check runs every one of these steps and prints each
finding, whatever an earlier step or audit found. Everything it starts it stops, by PID.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp

from bench.suites.soak_audit import AuditOutcome, run_audit
from coordinated.sidecar.events.history_segments import expanded_lines, list_segments
from coordinated.sidecar.events.history_settings import RetentionPolicy
from coordinated.sidecar.node_settings import sidecar_registry
from coordinated.tools.localcluster import FAST_SETTINGS, LocalCluster, LocalNode
from coordinated.tools.s3server import S3Server

REPO = Path(__file__).resolve().parents[2]
BUCKET = "archive"
BASE_PATH = "soak"
CHECKPOINT = f"s3://{BUCKET}/{BASE_PATH}/_audit/soak/checkpoint.json"  # where the operator's CronJob keeps it
STOP_TIMEOUT_S = 30.0  # a graceful stop waits up to 10 s for the archive to take the last segment

RETENTION = {
    "history.retention.max_size": "2mb",
    "history.segment_size": "256kb",
}
KEYS = 200  # a bounded key space: the state itself does not grow
WARM_UP_S = 120.0
# How much a figure may grow from the first half of the run (after warm-up) to the second. The history is not
# among them: it fills up to its bound for the first quarter hour at 50 writes/s, so it is held to that bound
# instead, which also makes a run shorter than the filling a fair check.
TOLERANCE = {"store_mb": (0.10, 1.0), "rss_mb": (0.15, 8.0), "fds": (0.0, 4.0)}


@dataclass
class Sample:
    minute: float
    node: str
    disk_mb: float  # the whole data directory
    history_mb: float
    rss_mb: float
    fds: int
    archive_lag_s: float | None  # how long the oldest closed segment not archived yet has waited
    archive_pending: float | None  # closed segments not archived yet

    @property
    def store_mb(self) -> float:
        """The data directory without the history: the state store and its write-ahead log."""
        return self.disk_mb - self.history_mb


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


def archive_metrics(node: LocalNode) -> dict[str, float]:
    """The node's `coordinated_archive_*` gauges and counters (none when it does not answer)."""
    try:
        with urllib.request.urlopen(f"{node.url}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return {}
    values = {}
    for line in text.splitlines():
        if line.startswith("coordinated_archive_"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def sample(node: LocalNode, minute: float) -> Sample:
    assert node.process is not None
    pid = node.process.pid
    archive = archive_metrics(node)
    return Sample(
        minute=round(minute, 2),
        node=node.name,
        disk_mb=du(node.data_dir) / 1e6,
        history_mb=du(node.data_dir / "history") / 1e6,
        rss_mb=rss_mb(pid),
        fds=len(os.listdir(f"/proc/{pid}/fd")),
        archive_lag_s=archive.get("coordinated_archive_oldest_pending_age_seconds"),
        archive_pending=archive.get("coordinated_archive_pending_segments"),
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


def history_bound_mb(settings: dict[str, str]) -> float:
    """The most a node's history may hold with these settings and an archive that keeps up: the retention's
    `max_size` (which counts the open segment) plus one more segment. A cut runs every 5 seconds and right after
    each segment closes, so between two cuts only the open segment grows, and never past the segment size."""
    policy = RetentionPolicy.from_settings(sidecar_registry().parse({"node.name": "soak", **settings}))
    return (policy.max_size + policy.segment_size) / 1e6


def above_bound(samples: list[Sample], bound_mb: float) -> list[str]:
    """Per node: its largest history, when any sample is above the bound."""
    problems = []
    for node in sorted({s.node for s in samples}):
        largest = max(s.history_mb for s in samples if s.node == node)
        if largest > bound_mb:
            problems.append(f"{node}: its history reached {largest:.2f} MB, above its bound of {bound_mb:.2f} MB")
    return problems


def flatness_problems(samples: list[Sample]) -> list[str]:
    """Every node's history against its bound, and the other figures against growth past the warm-up."""
    problems = above_bound(samples, history_bound_mb(RETENTION))
    for field in TOLERANCE:
        problems += grew(samples, field, WARM_UP_S)
    return problems


def archive_settings(server: S3Server, credentials: Path) -> dict[str, str]:
    return {
        "history.archive.type": "s3",
        "history.archive.s3.bucket": BUCKET,
        "history.archive.s3.base_path": BASE_PATH,
        "s3.client.default.endpoint": server.endpoint,
        "s3.client.default.path_style_access": "true",
        "s3.client.default.credentials_file": str(credentials),
    }


def s3_server_binary() -> Path:
    """The S3-compatible server that `make test` builds (a no-op once cached)."""
    done = subprocess.run(
        [str(REPO / "scripts" / "install-tools.sh"), "S3_SERVER"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"scripts/install-tools.sh S3_SERVER failed: {done.stderr[-2000:]}")
    return Path(done.stdout.strip().partition("=")[2])


def audit_command(server: S3Server, credentials: Path, driver_memory: str) -> Callable[[Path], list[str]]:
    """One incremental audit of the whole archive through s3a://, with the checkpoint kept in the bucket."""

    def command(report_dir: Path) -> list[str]:
        line = [sys.executable, "-m", "coordinated.cli", "audit", f"s3://{BUCKET}/{BASE_PATH}"]
        line += ["--checkpoint", CHECKPOINT, "--s3-endpoint", server.endpoint]
        line += ["--s3-credentials-file", str(credentials), "--report-dir", str(report_dir)]
        return [*line, "--no-html", "--spark-master", "local[1]", "--conf", f"spark.driver.memory={driver_memory}"]

    return command


@dataclass
class Coverage:
    """One node's events, from its archived objects and from what its disk still holds."""

    node: str
    last_seq: int
    last_archived_seq: int
    archived_events: int
    missing: list[int]  # seqs in neither
    lost: list[str]  # `history_lost` events


def seqs_of(paths: list[Path], lost: list[str]) -> set[int]:
    seqs = set()
    for path in paths:
        for line in expanded_lines(path):
            for event in line.events or ():
                seqs.add(int(event["seq"]))
                if event.get("type") == "history_lost":
                    lost.append(str(event.get("reason", event)))
    return seqs


def coverage(server: S3Server, node: LocalNode) -> Coverage:
    lost: list[str] = []
    objects = sorted(p for p in (server.root / BUCKET / BASE_PATH).glob(f"*/{node.node_id()}/segment-*") if p.is_file())
    archived = seqs_of(objects, lost)
    on_disk = seqs_of([s.path for s in list_segments(node.data_dir / "history")], lost)
    every = archived | on_disk
    last = max(every, default=0)
    return Coverage(
        node=node.node_id(),
        last_seq=last,
        last_archived_seq=max(archived, default=0),
        archived_events=len(archived),
        missing=sorted(set(range(1, last + 1)) - every),
        lost=lost,
    )


def checkpoint_seqs(server: S3Server) -> dict[str, int]:
    """Per node, the last seq the chain of audits read (the checkpoint they left in the bucket)."""
    path = server.root / CHECKPOINT.removeprefix("s3://")
    covered: dict[str, int] = {}
    for mark in json.loads(path.read_text())["nodes"]:  # one mark per node and cluster (and before it joined one)
        covered[mark["node"]] = max(covered.get(mark["node"], 0), int(mark["last_seq"]))
    return covered


def chart(samples: list[Sample], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fields = [("disk_mb", "data dir (MB)"), ("history_mb", "history (MB)"), ("rss_mb", "RSS (MB)"), ("fds", "open fds")]
    fields += [("archive_lag_s", "archive lag (s)"), ("archive_pending", "segments not archived")]
    figure, axes = plt.subplots(len(fields), 1, figsize=(8, 2.2 * len(fields)), sharex=True)
    for axis, (field, label) in zip(axes, fields, strict=True):
        for node in sorted({s.node for s in samples}):
            mine = [s for s in samples if s.node == node and getattr(s, field) is not None]
            axis.plot([s.minute for s in mine], [getattr(s, field) for s in mine], label=node, marker=".")
        if field == "history_mb":  # what the end check holds each history to
            bound = axis.axhline(history_bound_mb(RETENTION), color="grey", linestyle="--", linewidth=1, label="bound")
            axis.legend(handles=[bound], loc="lower right", fontsize="small")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
    axes[0].legend(loc="upper left", fontsize="small")
    axes[-1].set_xlabel("minutes")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)  # drawn again at every sample: pyplot keeps every open figure


class Audits:
    """The soak's incremental audits, one at a time, each kept in DIR/audit-N/ as it runs (see soak_audit)."""

    def __init__(self, command: Callable[[Path], list[str]], out: Path, timeout_s: float) -> None:
        self.command, self.out, self.timeout_s = command, out, timeout_s
        self.outcomes: list[AuditOutcome] = []

    async def run(self) -> None:
        index = len(self.outcomes)
        outcome = await asyncio.to_thread(run_audit, index, self.command, self.out, self.timeout_s)
        self.outcomes.append(outcome)
        events = (outcome.report or {}).get("events")
        print(
            f"audit {index}: {outcome.verdict.value.upper()} in {outcome.seconds:.0f} s, {events} events, "
            f"{outcome.attempts} attempt(s){': ' + outcome.error if outcome.error else ''}",
            flush=True,
        )


async def soak(args: SoakOptions, cluster: LocalCluster, server: S3Server, out: Path) -> list[str]:
    credentials = server.credentials_file(out / "s3-credentials")
    cluster.settings.update(archive_settings(server, credentials))
    nodes = cluster.bootstrap(3, timeout=60)
    writer = Writer(nodes, args.rate)
    task = asyncio.get_running_loop().create_task(writer.run())
    samples: list[Sample] = []
    audits = Audits(audit_command(server, credentials, args.driver_memory), out, args.audit_timeout_min * 60)
    started = time.monotonic()
    next_audit = args.audit_every * 60 if args.audit_every else None
    next_sample = 0.0
    running: asyncio.Task[None] | None = None
    try:
        while (elapsed := time.monotonic() - started) < args.minutes * 60:
            if elapsed >= next_sample:
                samples.extend(sample(n, elapsed / 60) for n in nodes)
                save(out, samples, writer, {})  # kept as they are made: a later failure cannot lose them
                next_sample += args.sample_s
                print_samples(elapsed, writer, samples[-len(nodes) :])
            if next_audit is not None and elapsed >= next_audit and (running is None or running.done()):
                # The archive of running nodes: the audit holds back what is not settled yet (its frontier), and
                # the next one reads it. Writes and samples go on meanwhile, as they do under the CronJob.
                running = asyncio.get_running_loop().create_task(audits.run())
                next_audit += args.audit_every * 60
            await asyncio.sleep(1.0)
    finally:
        writer.stop()
        await task
    samples.extend(sample(n, (time.monotonic() - started) / 60) for n in nodes)  # as the writes stop
    save(out, samples, writer, {})
    if running is not None:
        await running
    problems, results = await end_check(cluster, nodes, server, writer, audits)
    problems += flatness_problems(samples)
    save(out, samples, writer, results)
    print(f"writes {writer.writes} (failed or unknown {writer.failures}); chart {out / 'soak.png'}", flush=True)
    return problems


def print_samples(elapsed: float, writer: Writer, latest: list[Sample]) -> None:
    print(
        f"{elapsed / 60:5.1f} min  writes {writer.writes}  "
        + "  ".join(
            f"{s.node}: {s.disk_mb:.1f}MB {s.rss_mb:.0f}MB-rss {s.fds}fd lag {s.archive_lag_s}s" for s in latest
        ),
        flush=True,
    )


class Findings:
    """The end check's findings, each printed as it is found; a step that cannot run is a finding too."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def fail(self, problem: str) -> None:
        self.problems.append(problem)
        print(f"end check: FAIL: {problem}", flush=True)

    def note(self, text: str) -> None:
        print(f"end check: {text}", flush=True)


async def end_check(
    cluster: LocalCluster, nodes: list[LocalNode], server: S3Server, writer: Writer, audits: Audits
) -> tuple[list[str], dict[str, Any]]:
    """Nothing lost: every key reads back, the last audit runs on everything archived, every event written is in
    the archive or on a disk, and the audits' checkpoint reaches every node's last archived event. Every step
    runs, whatever an earlier one (or a mid-run audit) found."""
    findings = Findings()
    try:
        unread = await read_back(nodes[0], writer)
        findings.note(f"{len(writer.acknowledged) - len(unread)} of {len(writer.acknowledged)} keys read back")
        for problem in unread:
            findings.fail(problem)
    except Exception as e:  # the check goes on: the other steps can still show what was lost
        findings.fail(f"the read-back could not run: {e!r}")
    # A graceful stop records `stopped` and archives the node's last segment. All nodes are told at once, which
    # keeps this short. (Stopped one by one, the last node's publication of the others' departure never
    # commits; its `stopped` event is what lets the audit settle it instead of holding it back for good.)
    with ThreadPoolExecutor(len(nodes)) as pool:
        stops = [(node, pool.submit(cluster.stop, node, STOP_TIMEOUT_S)) for node in nodes]
        for node, stopping in stops:
            try:
                stopping.result()
            except Exception as e:
                findings.fail(f"{node.name} did not stop gracefully: {e!r}")
    await audits.run()
    for outcome in audits.outcomes:
        for problem in outcome.problems():
            findings.fail(problem)
    try:
        covered = checkpoint_seqs(server)
    except Exception as e:
        covered = {}
        findings.fail(f"the audits' checkpoint could not be read: {e!r}")
    coverages = []
    for node in nodes:
        try:
            c = coverage(server, node)
        except Exception as e:
            findings.fail(f"{node.name}: its events could not be counted: {e!r}")
            continue
        coverages.append(c)
        findings.note(
            f"{c.node}: {c.last_seq} events, {c.archived_events} archived (up to seq {c.last_archived_seq}), "
            f"{len(c.missing)} in neither the archive nor the disk, the audits read up to seq {covered.get(c.node)}"
        )
        for reason in c.lost:
            findings.fail(f"history lost on {c.node}: {reason}")
        if c.missing:
            findings.fail(f"{c.node}: {len(c.missing)} events in neither the archive nor the disk: {c.missing[:10]}")
        if covered.get(c.node, 0) < c.last_archived_seq:
            findings.fail(f"{c.node}: the audits read up to seq {covered.get(c.node)}, not {c.last_archived_seq}")
    results = {
        "coverage": [asdict(c) | {"missing": len(c.missing)} for c in coverages],
        "audits": [o.summary() for o in audits.outcomes],
        "end_check": findings.problems,
    }
    return findings.problems, results


def save(out: Path, samples: list[Sample], writer: Writer, results: dict[str, Any]) -> None:
    """The samples and results in DIR/soak.json, and the chart in DIR/soak.png."""
    figures = {"samples": [asdict(s) for s in samples], "writes": writer.writes, "failures": writer.failures}
    (out / "soak.json").write_text(json.dumps(figures | results))
    chart(samples, out / "soak.png")


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


@dataclass(frozen=True)
class SoakOptions:
    """`python -m bench soak`'s options (parsed in bench/cli.py)."""

    minutes: float
    rate: float = 50.0
    sample_s: float = 60.0
    audit_every: float = 10.0
    driver_memory: str = "2g"
    audit_timeout_min: float = 60.0
    out: Path | None = None


def main(args: SoakOptions) -> int:
    out = args.out or Path(tempfile.mkdtemp(prefix="soak-out-"))
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="soak-"))
    cluster = LocalCluster(workdir / "cluster", settings={**FAST_SETTINGS, **RETENTION})
    server = S3Server(s3_server_binary(), workdir / "s3")
    server.create_bucket(BUCKET)
    try:
        with server:
            problems = asyncio.run(soak(args, cluster, server, out))
    finally:
        cluster.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)
    for problem in problems:
        print(f"FAIL: {problem}")
    print("soak: " + ("FAILED" if problems else "ok"))
    return 1 if problems else 0
