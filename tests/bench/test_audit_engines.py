"""`python -m bench audit engines` compares like with like: its DuckDB query builds the audit's state table exactly as
`state_table` does in Spark, state by state, on a history with conflicting copies, quorums that name nodes that
never accepted or are outside the configuration, and a commit without a quorum; and the bench itself runs
both engines and finds their summaries equal."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from bench import ROOT
from bench.suites import audit_engines
from coordinated.audit.prepare import state_table
from coordinated.audit.reading import read_parquet
from coordinated.audit.schema import EVENT_SCHEMA
from coordinated.audit.session import build_session
from coordinated.audit.synth import SynthConfig, generate

pytestmark = pytest.mark.slow  # spark comes from the spark fixture

# The table's columns that do not depend on the hash function, and conditions on those that do.
COMPARED = (
    "term, version, conflict, accepted, committed, reset_root, committed_anywhere, applied, acc_mask, quorum_mask, "
    "quorum_odd, quorum_ok, first_accepted_ts, commit_ts, parent_h IS NULL AS no_parent, master_missing, "
    "master_min_h != master_max_h AS masters_differ, acc_cfg_min != acc_cfg_max AS accepted_configs_differ, "
    "acc_cfg_min IS NOT DISTINCT FROM commit_cfg AS commit_config_matches"
)


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = build_session("local[1]", {"spark.ui.showConsoleProgress": "false"})
    yield session
    session.stop()


@pytest.fixture(scope="module")
def history(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A valid history with violations of every kind the state table has a column for, as Parquet."""
    hb = generate(SynthConfig(events=1500, seed=11, nodes=5))
    master, followers = "node-0", ["node-1", "node-2"]
    hb.elect(master, max(hb.term.values()) + 1, followers)
    never_accepted = hb.make_state(master)
    hb.accept(master, never_accepted)
    hb.accept("node-1", never_accepted)
    hb.commit(master, never_accepted, (master, "node-1", "node-3"))  # node-3 never accepted it
    outsider = hb.make_state(master, parent=never_accepted)
    for n in (master, *followers):
        hb.accept(n, outsider)
    hb.commit(master, outsider, (master, "node-1", "a-node-outside-the-configuration"))
    hb.accept("node-3", dataclasses.replace(outsider, master="node-4"))  # a copy with other content
    no_quorum = hb.make_state(master, parent=outsider)
    for n in (master, *followers):
        hb.accept(n, no_quorum)
    hb.commit(master, no_quorum)
    hb.commit("node-4", hb.make_state(master, parent=no_quorum))  # committed by a follower only
    jsonl, parquet = tmp_path_factory.mktemp("jsonl"), tmp_path_factory.mktemp("parquet") / "history"
    hb.write(jsonl)
    spark.read.schema(EVENT_SCHEMA).option("recursiveFileLookup", "true").json(str(jsonl)).write.parquet(str(parquet))
    return parquet


def test_duckdb_builds_the_same_state_table_as_spark(spark: SparkSession, history: Path) -> None:
    table = state_table(read_parquet(spark, [str(history)], skip_malformed=False).events)
    table.createOrReplaceTempView("states")
    ours = {r["state_uuid"]: r.asDict() for r in spark.sql(f"SELECT state_uuid, {COMPARED} FROM states").collect()}

    query = f"SELECT state_uuid, {COMPARED} FROM ({audit_engines.duckdb_state_table(str(history))})"
    theirs = {r["state_uuid"]: r for r in audit_engines.duckdb_rows(audit_engines.duckdb_connection(), query)}

    assert set(ours) == set(theirs)
    differing = {uuid: (ours[uuid], theirs[uuid]) for uuid in ours if ours[uuid] != theirs[uuid]}
    assert differing == {}
    # The crafted violations are there, in both.
    rows = list(ours.values())
    assert sum(bool(r["conflict"]) for r in rows) == 1
    assert sum(bool(r["quorum_odd"]) for r in rows) == 1
    assert any(r["committed"] and r["quorum_mask"] & ~(r["acc_mask"] or 0) for r in rows)
    assert any(r["committed"] and r["quorum_ok"] is False for r in rows)
    assert any(r["committed_anywhere"] and not r["committed"] for r in rows)


def test_the_bench_runs_both_engines_and_finds_their_summaries_equal(history: Path, tmp_path: Path) -> None:
    figures = tmp_path / "figures.json"
    argv = [sys.executable, "-m", "bench", "audit", "engines", "--input", str(history), "--master", "local[1]"]
    argv += ["--rounds", "2", "--driver-memory", "1g", "--json", str(figures)]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, check=True).stdout
    assert "the two state tables agree" in out
    runs: dict[str, list[dict[str, Any]]] = json.loads(figures.read_text())
    assert [r["round"] for r in runs["spark"]] == [1, 2] and [r["round"] for r in runs["duckdb"]] == [1, 2]
    assert all(r["wall_s"] > 0 and r["cpu_s"] > 0 for rounds in runs.values() for r in rounds)
    summary = runs["spark"][-1]["summary"]
    assert summary["conflicts"] == 1 and summary["quorum_odd"] == 1 and summary["states"] > 100
