"""One audit, from loaded input to the report: the library entry point under the CLI."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from coordinated.audit import report as report_mod
from coordinated.audit.checkpoint import Checkpoint
from coordinated.audit.checkpoint import build as build_checkpoint
from coordinated.audit.invariants import run_all
from coordinated.audit.prepare import prepare
from coordinated.audit.reading import Input
from coordinated.audit.stats import compute
from coordinated.audit.violations import add_line_numbers


@dataclass
class Outcome:
    report: dict[str, Any]
    charts: dict[str, Any]  # chart series; rendered to PNGs only when an HTML report is written
    checkpoint: Checkpoint | None = None  # for the next incremental audit, when asked for


def audit(
    spark: SparkSession,
    inp: Input,
    *,
    max_examples: int = 5,
    max_violations: int = 20,
    source: str = "",
    checkpoint: Checkpoint | None = None,
    next_checkpoint: bool = False,
) -> Outcome:
    """Audit `inp`: with `checkpoint`, an incremental audit of what `with_checkpoint` left in it; with
    `next_checkpoint`, also the checkpoint for the audit after this one."""
    frames = prepare(
        spark,
        inp.events,
        max_examples=max_examples,
        max_violations=max_violations,
        scouted=inp.scout,
        scouting=inp.scouting,
        settle=inp.settle,
        folder=inp.origin,
        seed=checkpoint.seed if checkpoint is not None else None,
    )
    frames.cut_notes = inp.truncated
    following = None
    try:
        results = run_all(frames)
        stats = compute(frames, truncated=inp.truncated)
        resets = report_mod.resets_of(frames.nodes.resets)
        horizon = frames.horizon.describe()
        if next_checkpoint:
            following = build_checkpoint(frames.events, frames.states, frames.horizon.trimmed, frames.nodes.resets)
    finally:
        frames.release()
    add_line_numbers([v for r in results for v in r.violations])
    per_node = stats.summary["per_node"]
    assert isinstance(per_node, dict)
    report = report_mod.build(
        events=sum(int(n["events"]) for n in per_node.values()),
        # Each node once: a node's history may be in several pieces under several clusters (an incremental
        # audit's carried events from before the bootstrap stand apart from its new ones), one entry each.
        nodes=len({str(n["node"]) for n in per_node.values()}),
        malformed_lines=inp.malformed_lines,
        results=results,
        stats=stats,
        resets=resets,
        extra={"input": {"source": source, "truncated_lines": inp.truncated, "horizon": horizon}},
    )
    return Outcome(report, stats.charts, following)
