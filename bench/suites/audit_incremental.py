"""What an incremental audit costs: 1M new events on top of 1M and of 10M old ones.

    .venv/bin/python -m bench audit incremental --old 1000000 --old 10000000 --new 1000000 [--master 'local[2]']

For each size it generates one valid 5-node history (`coordinated.audit.synth`) of old + new events, in the
nodes' own layout: `segment-<first seq>.jsonl.zst`, format 2 (what the nodes write and an archive keeps; with
`--layout jsonl`, plain format-1 segments), every node's segments split where the old events end. Then:

1. `coordinated audit OLD --checkpoint CK`: the audit that leaves the checkpoint (timed, for context);
2. the new segments are added, and `coordinated audit ALL --checkpoint CK` runs: the incremental audit;
3. the anchor: `coordinated audit NEW`, the new segments alone in a folder of their own, without a checkpoint
   (a history that starts past seq 1, so it reports gaps: only its time counts).

It prints each run's time (as the CLI reports it, without JVM start-up, and end to end), its peak RSS (the
driver's Python and JVM; in local mode the JVM runs the tasks too) and the incremental audit's time against
the anchor's; the claim to check is that the incremental audit's time follows the new events, not the old
ones. `--audit-option=OPTION` (repeatable) is passed to every audit, for example
`--audit-option=--conf --audit-option=spark.driver.memory=2g`. Generated histories are kept in `--workdir` and
reused. Figures only.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import msgspec
import zstandard

from bench.suites.audit_scale import run_measured
from coordinated.audit.synth import SynthConfig, generate
from coordinated.coordination.history import HistoryEvent
from coordinated.coordination.history_format import LineEncoder, coerce_event

SEGMENT_EVENTS = 100_000
_AUDITED = re.compile(r"audited (\d+) events from \d+ nodes in ([\d.]+)s")


class LayoutWriter:
    """A synth sink writing each node's lines as the node would: segments named after their first seq, in
    format 2 and compressed (or plain format 1), a new segment at `SEGMENT_EVENTS`, at a restart, and at the
    boundary between the old and the new events (`split_at`, counted over all nodes)."""

    def __init__(self, old: Path, new: Path, split_at: int, compressed: bool) -> None:
        self.roots = (old, new)
        self.split_at = split_at
        self.compressed = compressed
        self.seen = 0
        self.lines: dict[str, list[bytes]] = defaultdict(list)
        self.first: dict[str, int] = {}
        self.root_of: dict[str, Path] = {}
        self.encoders: dict[str, LineEncoder] = defaultdict(LineEncoder)
        self.pending: dict[str, dict[str, object]] = {}  # a follower's commit, folded into the apply after it
        self.zstd = zstandard.ZstdCompressor(level=3, write_checksum=True)

    def __call__(self, node: str, line: str) -> None:
        self.seen += 1
        root = self.roots[0] if self.seen <= self.split_at else self.roots[1]
        if self.root_of.get(node) != root or len(self.lines[node]) >= SEGMENT_EVENTS:
            self.rotate(node)
            self.root_of[node] = root
        event = msgspec.json.decode(line)
        if not self.compressed:
            self._add(node, event["seq"], line.encode() + b"\n")
            return
        pending = self.pending.pop(node, None)
        if pending is not None:
            folds = event["type"] == "applied" and event["state_uuid"] == pending["state_uuid"]
            if folds:
                self._encode(node, event, folds=True)
                return
            self._encode(node, pending, folds=False)
        if event["type"] == "committed" and event["quorum"] is None:
            self.pending[node] = event
            return
        self._encode(node, event, folds=False)

    def _encode(self, node: str, event: dict[str, object], folds: bool) -> None:
        history: HistoryEvent = coerce_event(event)
        seq, ts = int(event["seq"]), float(event["ts"])  # type: ignore[call-overload, arg-type]
        self._add(node, seq - 1 if folds else seq, self.encoders[node].encode(history, seq, ts, folds_commit=folds))

    def _add(self, node: str, first_seq: int, data: bytes) -> None:
        if not self.lines[node]:
            self.first[node] = first_seq
        self.lines[node].append(data)

    def rotate(self, node: str) -> None:
        pending = self.pending.pop(node, None)
        if pending is not None:
            self._encode(node, pending, folds=False)
        lines = self.lines.pop(node, [])
        self.encoders[node].start_segment()  # the next segment's first line carries every field again
        if not lines:
            return
        folder = self.root_of[node] / node
        folder.mkdir(parents=True, exist_ok=True)
        name = f"segment-{self.first[node]:012d}.jsonl"
        data = b"".join(lines)
        if self.compressed:
            (folder / (name + ".zst")).write_bytes(self.zstd.compress(data))
        else:
            (folder / name).write_bytes(data)

    def close(self) -> None:
        for node in list(self.lines):
            self.rotate(node)


def generated(workdir: Path, old: int, new: int, compressed: bool) -> Path:
    home = workdir / f"{old}+{new}-{'zst' if compressed else 'jsonl'}"
    if (home / "done").exists():
        return home
    shutil.rmtree(home, ignore_errors=True)
    writer = LayoutWriter(home / "old", home / "new", old, compressed)
    generate(SynthConfig(events=old + new, seed=1), sink=writer, on_restart=writer.rotate)
    writer.close()
    (home / "done").write_text(f"{writer.seen} events\n")
    return home


@dataclass
class Run:
    events: int
    seconds: float  # the audit's own time, as the CLI reports it (without JVM start-up)
    wall: float  # end to end
    peak_mb: float  # the driver's peak RSS, Python and JVM (in local mode the JVM runs the tasks too)

    def text(self) -> str:
        return f"{self.events:,} events in {self.seconds:.1f}s ({self.wall:.1f}s end to end, peak RSS {self.peak_mb:,.0f} MB)"


def audit(paths: list[Path], master: str, *extra: str, valid: bool = True) -> Run:
    """One `coordinated audit`; `valid`: the history has no violation, so anything but exit 0 is a failure of
    the audit (the anchor's history starts past seq 1, so it may report gaps: exit 1)."""
    command = [sys.executable, "-m", "coordinated.cli", "audit", *map(str, paths), "--spark-master", master]
    command += ["--no-html", "--report-dir", tempfile.mkdtemp(prefix="audit-incremental-report-"), *extra]
    code, wall, out, meter = run_measured(command)
    found = _AUDITED.search(out)
    if code not in ((0,) if valid else (0, 1)) or found is None:
        raise SystemExit(f"audit failed (exit {code}): {out[-2000:]}")
    return Run(int(found.group(1)), float(found.group(2)), wall, meter.peak_total / 1e6)


def bench(workdir: Path, old: int, new: int, master: str, compressed: bool, extra: list[str]) -> None:
    home = generated(workdir, old, new, compressed)
    run = Path(tempfile.mkdtemp(prefix="audit-incremental-", dir=workdir))
    try:
        history, only_new = run / "history", run / "only-new"
        shutil.copytree(home / "old", history, copy_function=_link)
        checkpoint = run / "checkpoint.json"
        first = audit([history], master, "--checkpoint", str(checkpoint), *extra)
        print(f"{old:>10,} old: the audit that writes the checkpoint: {first.text()}")
        shutil.copytree(home / "new", history, copy_function=_link, dirs_exist_ok=True)
        shutil.copytree(home / "new", only_new, copy_function=_link)
        size = checkpoint.stat().st_size
        incremental = audit([history], master, "--checkpoint", str(checkpoint), *extra)
        print(f"{'':>10} incremental: {incremental.text()}")
        anchor = audit([only_new], master, *extra, valid=False)
        print(f"{'':>10} anchor, the new segments alone: {anchor.text()}")
        print(
            f"{'':>10} incremental / anchor: {incremental.seconds / anchor.seconds:.2f} "
            f"(end to end {incremental.wall / anchor.wall:.2f}); checkpoint {size / 1e6:.1f} MB; load {_load()}"
        )
    finally:
        shutil.rmtree(run, ignore_errors=True)


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _link(source: str, target: str) -> None:
    Path(target).hardlink_to(source)


def main(
    old: tuple[int, ...], new: int, master: str, layout: str, workdir: Path, audit_options: tuple[str, ...]
) -> None:
    """`python -m bench audit incremental` (its options are in bench/cli.py)."""
    workdir.mkdir(parents=True, exist_ok=True)
    for old_events in old:
        bench(workdir, old_events, new, master, layout == "zst", list(audit_options))
