"""Golden histories from the deterministic simulator: faulty runs that passed every safety check must
audit clean, and a forged second master in one of them must be caught."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from audit_helpers import audit_dir, invariants_of
from pyspark.sql import SparkSession

from coordinated.simulation.chaos import run_random_schedule


@pytest.mark.parametrize(("seed", "nodes"), [(3, 5), (11, 3), (21, 4)])
def test_simulated_fault_runs_audit_clean(spark: SparkSession, tmp_path: Path, seed: int, nodes: int) -> None:
    report = run_random_schedule(seed, nodes, chaos_ms=15_000)
    assert report.cluster is not None
    paths = report.cluster.write_histories(tmp_path / "history")
    events = sum(len(path.read_text().splitlines()) for path in paths)
    result = audit_dir(spark, tmp_path / "history")
    assert result["violations"] == []
    assert result["ok"] is True
    assert result["events"] == events
    assert result["nodes"] == nodes


def test_a_simulated_history_with_session_events_audits_clean(spark: SparkSession, tmp_path: Path) -> None:
    report = run_random_schedule(2, 3, chaos_ms=15_000, sessions=2)
    assert report.cluster is not None
    paths = report.cluster.write_histories(tmp_path / "history")
    lines = [json.loads(line) for path in paths for line in path.read_text().splitlines()]
    kinds = {event["type"] for event in lines}
    assert {"session_created", "session_expired"} <= kinds, kinds
    result = audit_dir(spark, tmp_path / "history")
    assert result["violations"] == [] and result["ok"] is True
    assert result["events"] == len(lines) and result["malformed_lines"] == 0


def test_a_forged_election_in_a_simulated_history_is_caught(spark: SparkSession, tmp_path: Path) -> None:
    report = run_random_schedule(5, 3, chaos_ms=10_000)
    assert report.cluster is not None
    paths = report.cluster.write_histories(tmp_path / "history")
    elected = [json.loads(line) for line in paths[0].read_text().splitlines()]
    other = [json.loads(line) for line in paths[1].read_text().splitlines()]
    winner = next(event for event in elected + other if event["type"] == "elected")
    forger = other if winner["node"] != other[0]["node"] else elected
    forged = dict(winner, node=forger[0]["node"], seq=forger[-1]["seq"] + 1)
    target = paths[1] if forger is other else paths[0]
    with target.open("a") as file:
        file.write(json.dumps(forged) + "\n")
    assert "one-master-per-term" in invariants_of(audit_dir(spark, tmp_path / "history"))
