"""Helpers for the audit tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from coordinated.audit.reading import load
from coordinated.audit.run import audit
from coordinated.audit.synth import HistoryBuilder, State


def audit_dir(spark: SparkSession, path: Path, **kwargs: Any) -> dict[str, Any]:
    """Audit a folder of JSONL (or Parquet) with the library, as the CLI does, and return the report."""
    inp = load(spark, [str(path)], skip_malformed=kwargs.pop("skip_malformed", False))
    try:
        return audit(spark, inp, **kwargs).report
    finally:
        inp.release()


def audit_builder(spark: SparkSession, hb: HistoryBuilder, tmp_path: Path) -> dict[str, Any]:
    hb.write(tmp_path / "history")
    return audit_dir(spark, tmp_path / "history")


def invariants_of(report: dict[str, Any]) -> set[str]:
    return {v["invariant"] for v in report["violations"]}


def remove_settings(hb: HistoryBuilder, node: str, *, record: bool = True) -> None:
    """`coordinated node-tool remove-settings` on a stopped `node`: its copy of its last-accepted state is
    rewritten (same term and version, a new uuid whose parent is the old copy), recorded by a `settings_removed`
    event unless `record` is false; the node then restarts."""
    old = hb.accepted[node]
    assert old is not None
    copy = State(
        old.term,
        old.version,
        hb.new_uuid(),
        old.state_uuid,
        old.master,
        old.last_committed_config,
        old.last_accepted_config,
    )
    if record:
        hb.seq[node] += 1
        event = {
            **json.loads(hb.lines[node][-1]),
            "seq": hb.seq[node],
            "ts": hb.ts,
            "type": "settings_removed",
            "state_uuid": copy.state_uuid,
            "parent_uuid": copy.parent_uuid,
            "quorum": None,
            "current_term": hb.term[node],
            "previous_state_uuid": old.state_uuid,
            "settings": ["cluster.no_master_block"],
        }
        hb.lines[node].append(json.dumps(event))
    hb.accepted[node] = copy
    hb.restart(node)
