"""After a run: linearizability, acknowledged writes present or superseded, the audit, unavailability."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

from coordinated.simulation.linearizability import MISSING, Operation, check_history

# Bounds the search so that a pathological history fails the check with a message instead of hanging the run.
MAX_STATES_PER_KEY = 2_000_000


def linearizable(operations: list[Operation]) -> tuple[bool, str]:
    verdict = check_history(operations, max_states_per_key=MAX_STATES_PER_KEY)
    return verdict.ok, "ok" if verdict.ok else f"key {verdict.key}: {verdict.detail}"


def dump(operations: list[Operation], faults: list[Any], path: Path) -> None:
    """Every operation and fault as JSON lines, for a post-mortem of a failed check."""
    with path.open("w") as out:
        for op in operations:
            out.write(
                json.dumps({**asdict(op), "completed": None if op.completed == math.inf else op.completed}) + "\n"
            )
        for fault in faults:
            out.write(json.dumps({"fault": asdict(fault)}) + "\n")


def stale_reads(operations: list[Operation], limit: int = 5) -> str:
    """Name the reads that returned a value already overwritten, by an acknowledged write, before the read
    began: the usual shape of a linearizability failure, and cheap to find (unlike a minimal sub-history)."""
    found = []
    writes = [op for op in operations if op.kind != "get"]
    for read in (op for op in operations if op.kind == "get"):
        same = [w for w in writes if w.key == read.key]
        missing = read.result is MISSING
        sources = [w for w in same if (w.kind == "delete" if missing else w.kind == "put" and w.value == read.result)]
        latest = max((w.completed for w in sources), default=-math.inf)
        newer = [
            w for w in same if w.certain and latest < w.invoked and w.completed < read.invoked and w not in sources
        ]
        if sources and newer:
            found.append(
                f"read of {read.key} by client {read.client} returned {read.result!r}, overwritten by {newer[0].kind} {newer[0].value!r} {read.invoked - newer[0].completed:.2f} s before the read began"
            )
    return f"{len(found)} stale read(s): " + "; ".join(found[:limit])


def lost_writes(acked: list[Operation], final: dict[str, Any], all_writes: list[Operation]) -> list[str]:
    """Every acknowledged write must be in the final state, or be superseded: the write that produced the final
    value must not have completed before that acknowledged write was even invoked."""
    problems = []
    by_key: dict[str, list[Operation]] = defaultdict(list)
    for op in all_writes:
        by_key[op.key].append(op)
    for key, value in final.items():
        acked_here = [op for op in acked if op.key == key]
        if value is MISSING:
            sources = [op for op in by_key[key] if op.kind == "delete"]
        else:
            sources = [op for op in by_key[key] if op.kind == "put" and op.value == value]
        if value is not MISSING and not sources:
            problems.append(f"{key}: final value {value!r} was never written")
            continue
        if value is MISSING and not sources:
            if acked_here:
                problems.append(f"{key}: absent at the end, but {len(acked_here)} acknowledged write(s) and no delete")
            continue
        # The latest the final value's write can have taken effect; an ack invoked after it must survive.
        latest = max(op.completed for op in sources)
        for op in acked_here:
            if op.invoked > latest and not (op.kind == "put" and op.value == value):
                problems.append(f"{key}: acknowledged {op.kind} {op.value!r} lost (final {value!r})")
    return problems


def unavailability(
    ok_times: list[float], started: float, ended: float, gap_s: float = 1.0
) -> list[tuple[float, float]]:
    """Gaps longer than `gap_s` with no successful operation, as (start, length) relative to the run start."""
    times = sorted(t for t in ok_times if started <= t <= ended)
    windows = []
    previous = started
    for t in [*times, ended]:
        if t - previous > gap_s:
            windows.append((previous - started, t - previous))
        previous = t
    return windows


def audit(history_dirs: list[Path], report_dir: Path) -> tuple[bool, str]:
    argv = [sys.executable, "-m", "coordinated.cli", "audit", *map(str, history_dirs), "--report-dir", str(report_dir)]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    # Spark's progress bars go to stderr; the verdict lines are on stdout.
    tail = result.stdout.strip().splitlines()[-2:] or result.stderr.strip().splitlines()[-2:]
    return result.returncode == 0, f"exit {result.returncode}; report in {report_dir}; " + " / ".join(tail)
