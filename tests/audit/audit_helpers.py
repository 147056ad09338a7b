"""Helpers for the audit tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from coordinated.audit.reading import load
from coordinated.audit.run import audit
from coordinated.audit.synth import HistoryBuilder


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
