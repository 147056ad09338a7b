"""Each invariant of docs/audit.md: valid histories pass, and a crafted history that breaks exactly
one invariant is reported under exactly that name, with the offending event among the examples.

Spark jobs cost far more than these tiny histories, so every scenario is its own cluster (its own
cluster UUID, nodes named "<scenario>/<x>") and one audit covers them all; each test then looks at the
violations whose examples are its scenario's events. The per-cluster and per-node grouping this relies
on is itself under test: a scenario's violation showing up elsewhere would fail the valid scenarios.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from audit_helpers import audit_dir, invariants_of
from pyspark.sql import SparkSession

from coordinated.audit.schema import INVARIANTS
from coordinated.audit.synth import HistoryBuilder, State, SynthConfig, generate

pytestmark = pytest.mark.spark


@dataclass
class Built:
    hb: HistoryBuilder
    facts: dict[str, Any]


SCENARIOS: dict[str, Callable[[str], Built]] = {}


def scenario(fn: Callable[[str], Built]) -> Callable[[str], Built]:
    SCENARIOS[fn.__name__] = fn
    return fn


def builder(name: str, nodes: str = "abc") -> tuple[HistoryBuilder, Callable[[str], str]]:
    def n(x: str) -> str:
        return f"{name}/{x}"

    return HistoryBuilder([n(x) for x in nodes], f"{name}-cluster", seed=7), n


def base(name: str) -> tuple[HistoryBuilder, Callable[[str], str]]:
    """Three nodes, a elected in term 1, two committed and applied states."""
    hb, n = builder(name)
    hb.elect(n("a"), 1, [n("b"), n("c")])
    hb.publish(n("a"), [n("b"), n("c")])
    hb.publish(n("a"), [n("b"), n("c")])
    return hb, n


@scenario
def valid_base(name: str) -> Built:
    hb, _ = base(name)
    return Built(hb, {})


@scenario
def two_elected(name: str) -> Built:
    hb, n = base(name)
    hb.emit(n("b"), "elected", 1)
    return Built(hb, {})


@scenario
def wrong_master_named(name: str) -> Built:
    hb, n = base(name)
    rogue = replace(hb.make_state(n("a")), master=n("c"))
    hb.publish(n("a"), [n("b"), n("c")], state=rogue)
    return Built(hb, {"rogue": rogue})


@scenario
def twin_states(name: str) -> Built:
    hb, n = base(name)
    s3 = hb.publish(n("a"), [n("b")])
    twin = replace(s3, state_uuid="twin-of-s3")
    hb.accept(n("c"), twin)
    return Built(hb, {"s3": s3})


@scenario
def fork(name: str) -> Built:
    hb, n = builder(name)
    hb.elect(n("a"), 1, [n("b"), n("c")])
    s1 = hb.publish(n("a"), [n("b"), n("c")])
    s2 = hb.publish(n("a"), [n("b"), n("c")])
    forked = hb.make_state(n("a"), parent=s1, version=3)  # version 3, derived from version 1
    hb.publish(n("a"), [n("b"), n("c")], state=forked)
    return Built(hb, {"s1": s1, "s2": s2, "fork": forked})


@scenario
def unknown_parent(name: str) -> Built:
    hb, n = base(name)
    orphan = replace(hb.make_state(n("a")), parent_uuid="never-seen")
    hb.publish(n("a"), [n("b"), n("c")], state=orphan)
    return Built(hb, {})


@scenario
def valid_two_failed_masters(name: str) -> Built:
    """The committed state descends through two uncommitted states re-published by new masters."""
    hb, n = base(name)
    hb.publish(n("a"), [n("b")], commit=False)  # (1, 3), never committed
    hb.elect(n("b"), 2, [n("c")])
    hb.publish(n("b"), [], commit=False)  # (2, 4) re-publishes (1, 3); never committed
    hb.elect(n("b"), 3, [n("c")])
    hb.publish(n("b"), [n("a"), n("c")])  # (3, 5) -> (2, 4) -> (1, 3) -> (1, 2)
    return Built(hb, {})


@scenario
def lost_intermediate(name: str) -> Built:
    """As above, but the intermediate state is in nobody's history: the chain is broken."""
    hb, n = base(name)
    s3 = hb.publish(n("a"), [n("b")], commit=False)
    hb.elect(n("b"), 2, [n("c")])
    hb.elect(n("b"), 3, [n("c")])
    lost = replace(s3, state_uuid="lost")
    hb.publish(n("b"), [n("a"), n("c")], state=hb.make_state(n("b"), parent=lost, version=5))
    return Built(hb, {})


@scenario
def committed_term_back(name: str) -> Built:
    hb, n = base(name)
    hb.elect(n("b"), 2, [n("c")])
    s3 = hb.publish(n("b"), [n("c")])
    old = State(1, 4, "from-the-past", s3.state_uuid, n("a"), s3.last_committed_config, s3.last_accepted_config)
    hb.commit(n("a"), old, (n("a"), n("c")))  # a term-1 state committed after term 2 committed
    return Built(hb, {})


@scenario
def applied_uncommitted(name: str) -> Built:
    hb, n = base(name)
    s3 = hb.publish(n("a"), [n("b"), n("c")], commit=False)
    hb.apply(n("b"), s3)
    return Built(hb, {"s3": s3})


@scenario
def applied_back(name: str) -> Built:
    hb, n = builder(name)
    hb.elect(n("a"), 1, [n("b"), n("c")])
    s1 = hb.publish(n("a"), [n("b"), n("c")])
    hb.publish(n("a"), [n("b"), n("c")])
    hb.apply(n("b"), s1)
    return Built(hb, {})


@scenario
def term_back(name: str) -> Built:
    hb, n = base(name)
    hb.elect(n("b"), 3, [n("a"), n("c")])
    hb.emit(n("c"), "term", 2)
    return Built(hb, {})


@scenario
def no_quorum(name: str) -> Built:
    hb, n = base(name)
    s3 = hb.make_state(n("a"))
    hb.accept(n("a"), s3)
    hb.accept(n("b"), s3)
    hb.commit(n("a"), s3, (n("a"),))  # one of three is no majority
    return Built(hb, {"s3": s3})


def _joint(name: str, acks: str) -> Built:
    hb, n = builder(name, "abcde")
    hb.elect(n("a"), 1, [n("b"), n("c")])
    hb.publish(n("a"), [n("b"), n("c")])
    # Joint consensus from {a,b,c} to {c,d,e}: {a,b,c} is a majority of the old configuration only.
    joint = hb.make_state(n("a"), config=(n("c"), n("d"), n("e")), last_committed_config=(n("a"), n("b"), n("c")))
    hb.publish(n("a"), [n(x) for x in acks], state=joint)
    return Built(hb, {})


@scenario
def joint_minority(name: str) -> Built:
    return _joint(name, "bc")


@scenario
def valid_joint(name: str) -> Built:
    return _joint(name, "bcd")  # {a,b,c,d} is a majority of both


@scenario
def seq_hole(name: str) -> Built:
    hb, n = base(name)
    # b's events: term, accepted, committed, applied (seq 4), ...: drop that applied event.
    assert '"seq":4,' in hb.lines[n("b")][3] and '"type":"applied"' in hb.lines[n("b")][3]
    del hb.lines[n("b")][3]
    return Built(hb, {})


@scenario
def seq_start_and_reuse(name: str) -> Built:
    hb, n = base(name)
    del hb.lines[n("c")][0]  # c's first event (seq 1)
    hb.emit(n("a"), "stepped_down", 1, seq=hb.seq[n("a")])  # a reuses its last seq
    return Built(hb, {})


@scenario
def valid_restart_single_node(name: str) -> Built:
    hb, n = builder(name, "s")
    hb.elect(n("s"), 1)
    hb.publish(n("s"), [])
    hb.restart(n("s"))  # a new segment; seq continues
    hb.elect(n("s"), 2)
    hb.publish(n("s"), [])
    return Built(hb, {})


@pytest.fixture(scope="module")
def scenarios(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("scenarios")
    built = {}
    for name, fn in SCENARIOS.items():
        built[name] = fn(name)
        built[name].hb.write(root / name)
    report = audit_dir(spark, root, max_violations=1000)
    return {"report": report, "built": built, "root": root}


def view(scenarios: dict[str, Any], name: str) -> tuple[list[dict[str, Any]], Built]:
    """The violations whose examples are all events of scenario `name`."""
    mine = [
        v
        for v in scenarios["report"]["violations"]
        if v["examples"] and all(e["node"].split("/")[0] == name for e in v["examples"])
    ]
    return mine, scenarios["built"][name]


def names(violations: list[dict[str, Any]]) -> set[str]:
    return {v["invariant"] for v in violations}


def test_every_violation_belongs_to_one_scenario(scenarios: dict[str, Any]) -> None:
    report = scenarios["report"]
    owned = sum(len(view(scenarios, name)[0]) for name in SCENARIOS)
    assert owned == len(report["violations"]) > 0
    assert report["events"] == sum(len(ls) for b in scenarios["built"].values() for ls in b.hb.lines.values())
    assert len(report["stats"]["clusters"]) == len(SCENARIOS)
    assert set(report["stats"]["violation_counts"]) == set(INVARIANTS)


@pytest.mark.parametrize("name", [n for n in SCENARIOS if n.startswith("valid_")])
def test_valid_scenarios(scenarios: dict[str, Any], name: str) -> None:
    assert view(scenarios, name)[0] == []


def test_two_masters_elected_in_one_term(scenarios: dict[str, Any]) -> None:
    (v,), _ = view(scenarios, "two_elected")
    assert v["invariant"] == "one-master-per-term"
    assert "term 1: 2 nodes were elected (two_elected/a, two_elected/b)" in v["detail"]
    assert {(e["node"], e["type"]) for e in v["examples"]} == {
        ("two_elected/a", "elected"),
        ("two_elected/b", "elected"),
    }


def test_state_naming_another_master(scenarios: dict[str, Any]) -> None:
    (v,), b = view(scenarios, "wrong_master_named")
    assert v["invariant"] == "one-master-per-term"
    assert "name wrong_master_named/c as master" in v["detail"]
    assert v["examples"] and {e["state_uuid"] for e in v["examples"]} == {b.facts["rogue"].state_uuid}


def test_two_states_with_one_term_and_version(scenarios: dict[str, Any]) -> None:
    (v,), b = view(scenarios, "twin_states")
    assert v["invariant"] == "unique-state-per-version"
    assert {e["state_uuid"] for e in v["examples"]} == {b.facts["s3"].state_uuid, "twin-of-s3"}
    assert all(e["version"] == 3 and e["term"] == 1 for e in v["examples"])


def test_committed_fork(scenarios: dict[str, Any]) -> None:
    (v,), b = view(scenarios, "fork")
    assert v["invariant"] == "committed-chain"
    assert "forks" in v["detail"] and b.facts["s1"].state_uuid in v["detail"]
    assert [e["state_uuid"] for e in v["examples"]] == [b.facts["fork"].state_uuid, b.facts["s2"].state_uuid]
    assert v["examples"][0]["type"] == "committed"


def test_committed_state_with_unknown_parent(scenarios: dict[str, Any]) -> None:
    (v,), _ = view(scenarios, "unknown_parent")
    assert v["invariant"] == "committed-chain" and "no node recorded" in v["detail"]


def test_chain_broken_by_a_lost_intermediate_state(scenarios: dict[str, Any]) -> None:
    (v,), _ = view(scenarios, "lost_intermediate")
    assert v["invariant"] == "committed-chain" and "descends from lost" in v["detail"]


def test_committed_terms_go_back(scenarios: dict[str, Any]) -> None:
    (v,), _ = view(scenarios, "committed_term_back")
    assert v["invariant"] == "committed-chain" and "lower term" in v["detail"]


def test_applied_but_never_committed(scenarios: dict[str, Any]) -> None:
    (v,), b = view(scenarios, "applied_uncommitted")
    assert v["invariant"] == "applied-only-committed"
    (e,) = v["examples"]
    assert (e["node"], e["type"], e["state_uuid"]) == ("applied_uncommitted/b", "applied", b.facts["s3"].state_uuid)


def test_applied_version_goes_back(scenarios: dict[str, Any]) -> None:
    (v,), b = view(scenarios, "applied_back")
    assert v["invariant"] == "node-monotonic"
    assert [(e["node"], e["version"]) for e in v["examples"]] == [("applied_back/b", 2), ("applied_back/b", 1)]
    assert v["examples"][1]["seq"] == b.hb.seq["applied_back/b"]


def test_term_goes_back(scenarios: dict[str, Any]) -> None:
    (v,), b = view(scenarios, "term_back")
    assert v["invariant"] == "node-monotonic"
    assert "term goes back from 3 to 2" in v["detail"]
    assert v["examples"][-1] == {
        "node": "term_back/c",
        "seq": b.hb.seq["term_back/c"],
        "type": "term",
        "term": 2,
        "version": None,
        "state_uuid": None,
    }


def test_commit_without_quorum(scenarios: dict[str, Any]) -> None:
    (v,), b = view(scenarios, "no_quorum")
    assert v["invariant"] == "commit-quorum"
    assert v["examples"] == [
        {
            "node": "no_quorum/a",
            "seq": b.hb.seq["no_quorum/a"],
            "type": "committed",
            "term": 1,
            "version": 3,
            "state_uuid": b.facts["s3"].state_uuid,
        }
    ]


def test_commit_quorum_needs_both_configurations(scenarios: dict[str, Any]) -> None:
    (v,), _ = view(scenarios, "joint_minority")
    assert v["invariant"] == "commit-quorum"
    assert "not a majority of last_accepted_config" in v["detail"]
    assert "last_committed_config" not in v["detail"]


def test_hole_in_seq(scenarios: dict[str, Any]) -> None:
    (v,), _ = view(scenarios, "seq_hole")
    assert v["invariant"] == "history-gap"
    assert "seq jumps from 3 to 5 (1 missing)" in v["detail"]
    assert [(e["node"], e["seq"]) for e in v["examples"]] == [("seq_hole/b", 3), ("seq_hole/b", 5)]


def test_history_that_does_not_start_at_one_and_reused_seq(scenarios: dict[str, Any]) -> None:
    violations, b = view(scenarios, "seq_start_and_reuse")
    assert names(violations) == {"history-gap"}
    assert sorted(v["detail"] for v in violations) == [
        f"node seq_start_and_reuse/a: seq {b.hb.seq['seq_start_and_reuse/a']} is used twice",
        "node seq_start_and_reuse/c: history starts at seq 2, not 1",
    ]


def test_restart_continues_seq_in_a_new_segment(scenarios: dict[str, Any]) -> None:
    root: Path = scenarios["root"]
    segments = sorted((root / "valid_restart_single_node" / "valid_restart_single_node" / "s").glob("*.jsonl"))
    assert len(segments) == 2
    assert scenarios["report"]["stats"]["per_node"]["valid_restart_single_node/s"]["last_seq"] == 10


def test_generated_histories_are_valid(spark: SparkSession, tmp_path: Path) -> None:
    # Three differently shaped clusters in one audit.
    cfgs = [
        SynthConfig(events=3000, seed=1),
        SynthConfig(events=1500, seed=2, nodes=3, p_failed_publish=0.8, extra_fields=True),
        SynthConfig(events=1000, seed=3, pre_bootstrap=False, mean_term_length=3, p_restart=0.6),
    ]
    total = 0
    for i, cfg in enumerate(cfgs):
        cfg.node_ids = [f"c{i}-n{j}" for j in range(cfg.nodes)]
        hb = generate(cfg)
        hb.write(tmp_path / "history" / f"cluster{i}", segment_events=300)
        total += sum(hb.seq.values())
    report = audit_dir(spark, tmp_path / "history", max_examples=3, max_violations=4)
    assert report["violations"] == []
    assert report["ok"] is True
    assert report["events"] == total
    assert report["nodes"] == 13
    assert len(report["stats"]["clusters"]) == 3
    assert report["stats"]["elections"]["count"] > 10
    assert report["stats"]["failover_gaps"]["count"] > 5
    assert report["stats"]["commit_latencies"]["count"] > 100
    # The lagging follower of a 5-node cluster applies only every 4th state.
    assert "c0-n4" in {n["node"] for n in report["stats"]["lagging_nodes"]}

    # The same histories with many violations of one kind: counted in full, listed up to the caps.
    with (tmp_path / "history" / "extra.jsonl").open("w") as fh:
        for t in range(1, 30):
            for node in ("c1-n0", "c1-n1"):
                fh.write(
                    f'{{"cluster_uuid":"_na_","node":"x-{node}","seq":{t},"ts":1.0,"type":"elected","term":{t}}}\n'
                )
    report = audit_dir(spark, tmp_path / "history", max_examples=1, max_violations=4)
    assert invariants_of(report) == {"one-master-per-term"}
    assert report["stats"]["violation_counts"]["one-master-per-term"] == 29
    assert len(report["violations"]) == 4
    assert all(len(v["examples"]) == 1 for v in report["violations"])
