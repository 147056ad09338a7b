"""The incremental audit (`--checkpoint`): a chain of incremental audits gives the verdicts of one full audit.

Every scenario is a cluster of its own whose events are split at a boundary (each node's seq when the
scenario calls `boundary()`). The first audit reads what lies before every boundary and writes a checkpoint;
the second reads everything with that checkpoint. Each violating scenario breaks exactly one invariant with
events on both sides of its boundary, so only what the checkpoint carries lets the second audit see it.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from audit_helpers import remove_settings
from pyspark.sql import SparkSession

from coordinated.audit import cli
from coordinated.audit.checkpoint import Checkpoint, NodeMark
from coordinated.audit.reading import UnusableInput
from coordinated.audit.synth import HistoryBuilder, seq_of

Scenario = Callable[[str, Callable[[HistoryBuilder], None]], HistoryBuilder]
SCENARIOS: dict[str, Scenario] = {}


def scenario(fn: Scenario) -> Scenario:
    SCENARIOS[fn.__name__] = fn
    return fn


def start(name: str) -> tuple[HistoryBuilder, Callable[[str], str]]:
    hb = HistoryBuilder([f"{name}/{x}" for x in "abc"], f"{name}-cluster", seed=11)
    n = lambda x: f"{name}/{x}"  # noqa: E731
    hb.elect(n("a"), 1, [n("b"), n("c")])
    hb.publish(n("a"), [n("b"), n("c")])
    return hb, n


@scenario
def valid_across_the_boundary(name: str, boundary: Callable[[HistoryBuilder], None]) -> HistoryBuilder:
    """Commits, applies, quorums and terms that straddle the boundary, all valid."""
    hb, n = start(name)
    s2 = hb.make_state(n("a"))
    for x in "abc":
        hb.accept(n(x), s2)
    hb.commit(n("b"), s2)  # b's own commit before, its apply after
    boundary(hb)
    hb.commit(n("a"), s2, (n("a"), n("b"), n("c")))  # accepted before, committed after
    hb.commit(n("c"), s2)
    for x in "bca":
        hb.apply(n(x), s2)
    hb.step_down(n("a"))
    hb.elect(n("b"), 2, [n("a"), n("c")])
    hb.publish(n("b"), [n("a"), n("c")])
    return hb


@scenario
def valid_settings_removed_before_the_boundary(name: str, boundary: Callable[[HistoryBuilder], None]) -> HistoryBuilder:
    """`node-tool remove-settings` on every stopped node before the boundary; after it, the new master's first
    state descends from its own rewritten copy, which only the carried `settings_removed` event names."""
    hb, n = start(name)
    for x in "abc":
        remove_settings(hb, n(x))
    hb.elect(n("a"), 2, [n("b"), n("c")])  # so that no node's last event is its `settings_removed`
    boundary(hb)
    hb.publish(n("a"), [n("b"), n("c")])
    return hb


@scenario
def one_master_per_term(name: str, boundary: Callable[[HistoryBuilder], None]) -> HistoryBuilder:
    hb, n = start(name)
    boundary(hb)
    hb.emit(n("b"), "elected", 1)  # a won term 1 before the boundary
    return hb


@scenario
def unique_state_per_version(name: str, boundary: Callable[[HistoryBuilder], None]) -> HistoryBuilder:
    hb, n = start(name)
    s2 = hb.publish(n("a"), [n("b"), n("c")])
    boundary(hb)
    hb.accept(n("c"), replace(s2, state_uuid="twin"))  # (1, 2) again, another uuid
    return hb


@scenario
def committed_chain(name: str, boundary: Callable[[HistoryBuilder], None]) -> HistoryBuilder:
    hb, n = start(name)
    s1 = hb.accepted[n("a")]
    assert s1 is not None
    hb.publish(n("a"), [n("b"), n("c")])
    boundary(hb)
    hb.publish(n("a"), [n("b"), n("c")], state=hb.make_state(n("a"), parent=s1, version=3))  # forks from v1
    return hb


@scenario
def applied_only_committed(name: str, boundary: Callable[[HistoryBuilder], None]) -> HistoryBuilder:
    hb, n = start(name)
    never = hb.publish(n("a"), [n("b"), n("c")], commit=False)
    boundary(hb)
    hb.apply(n("b"), never)
    return hb


@scenario
def node_monotonic(name: str, boundary: Callable[[HistoryBuilder], None]) -> HistoryBuilder:
    hb, n = start(name)
    hb.elect(n("b"), 3, [n("a"), n("c")])
    boundary(hb)
    hb.emit(n("c"), "term", 2)
    return hb


@scenario
def commit_quorum(name: str, boundary: Callable[[HistoryBuilder], None]) -> HistoryBuilder:
    hb, n = start(name)
    s2 = hb.make_state(n("a"))
    hb.accept(n("a"), s2)
    hb.accept(n("b"), s2)
    boundary(hb)
    hb.commit(n("a"), s2, (n("a"), n("c")))  # c never accepted it
    return hb


@scenario
def history_gap(name: str, boundary: Callable[[HistoryBuilder], None]) -> HistoryBuilder:
    hb, n = start(name)
    boundary(hb)
    hb.emit(n("c"), "term", 1, seq=hb.seq[n("c")] + 2)
    return hb


@scenario
def node_cluster_stable(name: str, boundary: Callable[[HistoryBuilder], None]) -> HistoryBuilder:
    hb, n = start(name)
    boundary(hb)
    hb.emit(n("c"), "term", 2, cluster_uuid=f"{name}-elsewhere")
    return hb


def write_until(hb: HistoryBuilder, limits: dict[str, int] | None, root: Path) -> None:
    """The builder's lines up to each node's seq in `limits` (all without)."""
    full = hb.lines
    hb.lines = {
        node: [line for line in lines if limits is None or seq_of(line) <= limits[node]] for node, lines in full.items()
    }
    try:
        hb.write(root)
    finally:
        hb.lines = full


def audit(root: Path, report: Path, *extra: str) -> dict[str, Any]:
    code = cli.main([str(root), "--report-dir", str(report), "--no-html", "--max-violations", "1000", *extra])
    result: dict[str, Any] = json.loads((report / "audit-report.json").read_text())
    assert code == (0 if result["ok"] else 1)
    return result


def verdicts(report: dict[str, Any]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {name: set() for name in SCENARIOS}
    for v in report["violations"]:
        owners = {e["node"].split("/")[0] for e in v["examples"]}
        assert len(owners) == 1, v
        out[owners.pop()].add(v["invariant"])
    return out


def test_a_chain_of_incremental_audits_gives_the_full_audits_verdicts(spark: SparkSession, tmp_path: Path) -> None:
    builders: dict[str, tuple[HistoryBuilder, dict[str, int]]] = {}
    for name, fn in SCENARIOS.items():
        marks: dict[str, int] = {}
        builders[name] = (fn(name, lambda hb, marks=marks: marks.update(hb.seq)), marks)  # type: ignore[misc]
    full = audit_full(builders, tmp_path)
    checkpoint = tmp_path / "checkpoint.json"
    growing = tmp_path / "growing"  # the same folders, read once before the boundaries and once after
    for name, (hb, marks) in builders.items():
        write_until(hb, marks, growing / name)
    first = audit(growing, tmp_path / "r1", "--checkpoint", str(checkpoint))
    assert first["ok"], first["violations"]  # every violation needs events after its boundary
    shutil.rmtree(growing)
    shutil.copytree(full["root"], growing)
    second = audit(growing, tmp_path / "r2", "--checkpoint", str(checkpoint))
    assert second["events"] + first["events"] == full["report"]["events"]
    # Each node once: the nodes of the checkpoint and of the new events are the same nodes (it said "from 6
    # nodes" for a 3-node cluster's second incremental audit).
    assert first["nodes"] == second["nodes"] == full["report"]["nodes"], (first["nodes"], second["nodes"])
    expected = verdicts(full["report"])
    assert expected == verdicts(second)
    assert {n for n, found in expected.items() if found} == {n for n in SCENARIOS if not n.startswith("valid_")}
    assert all(expected[n] == {n.replace("_", "-")} for n in SCENARIOS if not n.startswith("valid_"))


def audit_full(builders: dict[str, tuple[HistoryBuilder, dict[str, int]]], tmp_path: Path) -> dict[str, Any]:
    root = tmp_path / "full"
    for name, (hb, _) in builders.items():
        write_until(hb, None, root / name)
    return {"root": root, "report": audit(root, tmp_path / "r-full")}


# -- the checkpoint file, without Spark ----------------------------------------------------------------------


def test_only_segments_that_reach_past_the_last_seq_are_read(tmp_path: Path) -> None:
    checkpoint = Checkpoint(nodes=[NodeMark("c", "n", "file:/h/n1", 250, 3, (3, 40))])
    files = [f"file:///h/n1/segment-{first:012d}.jsonl.zst" for first in (1, 100, 200, 300)]
    files += ["file:///h/n2/segment-000000000001.jsonl", "file:///h/n1/history-000001.jsonl"]
    kept = checkpoint.unread_files(files)
    assert kept == [files[4], files[5], files[2], files[3]]  # 200-299 holds 251..299; other folders and names


def test_a_checkpoint_round_trips_and_a_bad_one_is_named(tmp_path: Path) -> None:
    path = tmp_path / "ck.json"
    assert Checkpoint.read(path) is None
    written = Checkpoint(
        nodes=[NodeMark("c", "n", "file:/h", 5, 2, (2, 9), trimmed=True)],
        chain_tips={"c": {"term": 2, "version": 9, "state_uuid": "s9"}},
        window={"c": 0},
        events=[{"cluster_uuid": "c", "node": "n", "seq": 5, "type": "term", "term": 2}],
    )
    written.write(path)
    assert json.loads(path.read_text())["format"] == 1
    assert Checkpoint.read(path) == written
    path.write_text('{"format": 7}')
    with pytest.raises(UnusableInput, match="format 7"):
        Checkpoint.read(path)
    path.write_text("{not json")
    with pytest.raises(UnusableInput, match=str(path)):
        Checkpoint.read(path)


def test_the_carried_events_are_not_in_the_plans_of_the_passes(spark: SparkSession) -> None:
    """The carried events reach Spark as one literal of several MB at scale; every task of every pass over the
    input deserialized it again (most of an incremental run's time) until the frame was cut off from its plan."""
    events = [
        {"cluster_uuid": "c", "node": "n", "seq": s, "type": "term", "term": 2, "ts": 1.0, "_node_name": "marker-xyz"}
        for s in range(1, 50)
    ]
    carried = Checkpoint(events=events).carried(spark)
    assert carried.count() == len(events)
    assert carried.filter("_node_name = 'marker-xyz'").count() == len(events)
    plan = carried._jdf.queryExecution().optimizedPlan().toString()
    assert "marker-xyz" not in plan
