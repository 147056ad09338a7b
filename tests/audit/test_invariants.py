"""Each invariant of docs/audit.md: valid histories pass, and a crafted history that breaks exactly
one invariant is reported under exactly that name, with the offending event among the examples.

Spark jobs cost far more than these tiny histories, so every scenario is its own cluster (its own
cluster UUID, nodes named "<scenario>/<x>") and one audit covers them all; each test then looks at the
violations whose examples are its scenario's events. The per-cluster and per-node grouping this relies
on is itself under test: a scenario's violation showing up elsewhere would fail the valid scenarios.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from audit_helpers import audit_dir, invariants_of
from pyspark.sql import SparkSession

from coordinated.audit.prepare import CHUNK_SETTING
from coordinated.audit.schema import INVARIANTS
from coordinated.audit.synth import HistoryBuilder, State, SynthConfig, generate


@dataclass
class Built:
    hb: HistoryBuilder
    facts: dict[str, Any]
    more: list[HistoryBuilder] = field(default_factory=list)  # further clusters of the same scenario

    def builders(self) -> list[HistoryBuilder]:
        return [self.hb, *self.more]


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
def term_back_after_bootstrap(name: str) -> Built:
    """As term_back, but the node's term before bootstrap ("_na_", another piece of its history) was already
    above the term it goes back to: still one term going back, reported once, where it happens."""
    hb, n = builder(name)
    hb.start_term(1, [n("a"), n("b"), n("c")])
    hb.elect(n("a"), 2, [n("b"), n("c")])  # before bootstrap: every node's "_na_" piece ends in term 2
    hb.publish(n("a"), [n("b"), n("c")])
    hb.elect(n("b"), 3, [n("a"), n("c")])
    hb.emit(n("c"), "term", 1)
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


# -- commit-quorum ----------------------------------------------------------------------------------------


@scenario
def master_commit_without_quorum(name: str) -> Built:
    hb, n = base(name)
    s3 = hb.make_state(n("a"))
    for x in "abc":
        hb.accept(n(x), s3)
    hb.commit(n("a"), s3, None)  # the master's commit names no quorum at all
    return Built(hb, {"s3": s3})


@scenario
def quorum_of_the_committing_event_only(name: str) -> Built:
    """The accepted events record {a..e}; the master's commit claims {a,b,c}, of which {a,b} is a majority."""
    hb, n = builder(name, "abcde")
    hb.elect(n("a"), 1, [n("b"), n("c")])
    wide = hb.make_state(
        n("a"), config=tuple(n(x) for x in "abcde"), last_committed_config=tuple(n(x) for x in "abcde")
    )
    hb.accept(n("a"), wide)
    hb.accept(n("b"), wide)
    narrow = replace(
        wide, last_committed_config=(n("a"), n("b"), n("c")), last_accepted_config=(n("a"), n("b"), n("c"))
    )
    hb.commit(n("a"), narrow, (n("a"), n("b")))
    return Built(hb, {"state": wide})


@scenario
def quorum_member_never_accepted(name: str) -> Built:
    hb, n = base(name)
    s3 = hb.make_state(n("a"))
    hb.accept(n("a"), s3)
    hb.accept(n("c"), s3)
    hb.commit(n("a"), s3, (n("a"), n("b")))  # b's history is here, and b never accepted s3
    return Built(hb, {"s3": s3})


@scenario
def valid_quorum_member_without_history(name: str) -> Built:
    """c is in the quorum, but c's history is not in the input: nothing to hold against the commit."""
    hb, n = base(name)
    hb.lines[n("c")] = []
    return Built(hb, {})


# -- applied-only-committed -------------------------------------------------------------------------------


@scenario
def follower_only_commit(name: str) -> Built:
    hb, n = base(name)
    s3 = hb.publish(n("a"), [n("b"), n("c")], commit=False)
    hb.commit(n("b"), s3)  # an ApplyCommit that no master decided
    hb.apply(n("b"), s3)
    return Built(hb, {"s3": s3})


@scenario
def apply_before_own_commit(name: str) -> Built:
    hb, n = base(name)
    s3 = hb.make_state(n("a"))
    for x in "abc":
        hb.accept(n(x), s3)
    hb.commit(n("a"), s3, (n("a"), n("b"), n("c")))
    hb.apply(n("b"), s3)  # b applies first ...
    hb.commit(n("b"), s3)  # ... and commits after
    hb.commit(n("c"), s3)
    hb.apply(n("c"), s3)
    hb.apply(n("a"), s3)
    return Built(hb, {"s3": s3})


# -- node-monotonic, unique-state-per-version, keying, node-cluster-stable ---------------------------------


@scenario
def stepped_down_term_back(name: str) -> Built:
    hb, n = base(name)
    hb.elect(n("b"), 3, [n("a"), n("c")])
    hb.emit(n("a"), "stepped_down", 1)  # a is in term 3 by now
    return Built(hb, {})


@scenario
def same_uuid_other_parent(name: str) -> Built:
    """c holds a state with s3's uuid, term and version, derived from s1: a diff applied to the wrong base."""
    hb, n = builder(name)
    hb.elect(n("a"), 1, [n("b"), n("c")])
    s1 = hb.publish(n("a"), [n("b"), n("c")])
    hb.publish(n("a"), [n("b"), n("c")])
    s3 = hb.publish(n("a"), [n("b")])
    hb.accept(n("c"), replace(s3, parent_uuid=s1.state_uuid))
    return Built(hb, {"s3": s3})


@scenario
def same_uuid_other_configs(name: str) -> Built:
    hb, n = base(name)
    s3 = hb.publish(n("a"), [n("b")])
    hb.accept(n("c"), replace(s3, last_accepted_config=(n("a"), n("b"))))  # {a,b} still holds the quorum
    return Built(hb, {"s3": s3})


@scenario
def valid_commit_carries_the_committed_configuration(name: str) -> Built:
    """A commit makes the last-accepted configuration the last-committed one: followers' `committed` and
    `applied` events may record the state in that form (the sidecar does), which is not a content conflict."""
    hb, n = builder(name, "abcde")
    hb.elect(n("a"), 1, [n("b"), n("c")])
    hb.publish(n("a"), [n("b"), n("c")])
    joint = hb.make_state(n("a"), config=(n("c"), n("d"), n("e")), last_committed_config=(n("a"), n("b"), n("c")))
    for x in "abcd":
        hb.accept(n(x), joint)
    hb.commit(n("a"), joint, tuple(n(x) for x in "abcd"))
    after = replace(joint, last_committed_config=joint.last_accepted_config)
    for x in "bcd":
        hb.commit(n(x), after)
        hb.apply(n(x), after)
    hb.apply(n("a"), after)
    return Built(hb, {})


@scenario
def valid_colliding_node_ids(name: str) -> Built:
    """Two clusters whose nodes have the same ids (and both write events before bootstrap)."""
    built = []
    for cluster in ("one", "two"):
        hb = HistoryBuilder([f"{name}/{x}" for x in "abc"], f"{name}-{cluster}", seed=len(cluster))
        hb.elect(f"{name}/a", 1, [f"{name}/b", f"{name}/c"])
        hb.publish(f"{name}/a", [f"{name}/b", f"{name}/c"])
        hb.elect(f"{name}/b", 2, [f"{name}/a", f"{name}/c"])
        hb.publish(f"{name}/b", [f"{name}/a", f"{name}/c"])
        built.append(hb)
    return Built(built[0], {}, built[1:])


@scenario
def node_changes_cluster(name: str) -> Built:
    hb, n = base(name)
    hb.emit(n("c"), "term", 2, cluster_uuid=f"{name}-elsewhere")  # c's next event names another cluster
    return Built(hb, {})


def trimmed(name: str) -> tuple[HistoryBuilder, Callable[[str], str]]:
    """A valid history whose nodes' retention cut it at different places: a (master of term 1) lost its
    commits of term 1's early states, c its accepts of term 2's first states (whose master b counted c in
    its quorum), b nothing: b's applies of a's states and b's quorums then lack evidence that was deleted."""
    hb, n = base(name)
    for _ in range(3):
        hb.publish(n("a"), [n("b"), n("c")])
    hb.step_down(n("a"))
    hb.elect(n("b"), 2, [n("a"), n("c")])
    for _ in range(4):
        hb.publish(n("b"), [n("a"), n("c")])
    hb.retention_cut(n("a"), 12)
    hb.retention_cut(n("c"), 25)
    return hb, n


@scenario
def valid_trimmed_by_retention(name: str) -> Built:
    hb, _ = trimmed(name)
    return Built(hb, {})


@scenario
def trimmed_then_a_lost_middle(name: str) -> Built:
    hb, n = trimmed(name)
    hb.emit(n("c"), "term", 2)  # an event no other check needs, lost at or above c's first kept seq
    lost = hb.seq[n("c")]
    hb.publish(n("b"), [n("a"), n("c")])
    hb.lines[n("c")] = [line for line in hb.lines[n("c")] if f'"seq":{lost},' not in line]
    return Built(hb, {"lost": lost})


@scenario
def trimmed_then_applied_uncommitted(name: str) -> Built:
    hb, n = trimmed(name)
    uncommitted = hb.publish(n("b"), [n("a"), n("c")], commit=False)
    hb.apply(n("c"), uncommitted)  # beyond the horizon: still judged
    return Built(hb, {"state": uncommitted})


@pytest.fixture(scope="module")
def scenarios(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("scenarios")
    built = {}
    for name, fn in SCENARIOS.items():
        built[name] = fn(name)
        for i, hb in enumerate(built[name].builders()):
            hb.write(root / name / str(i))
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
    builders = [hb for b in scenarios["built"].values() for hb in b.builders()]
    assert report["events"] == sum(len(ls) for hb in builders for ls in hb.lines.values())
    # Every builder's cluster, and "_na_" for a node that never bootstrapped (quorum_of_the_committing_event_only/c).
    assert set(report["stats"]["clusters"]) == {hb.cluster_uuid for hb in builders} | {"_na_"}
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
    violations, b = view(scenarios, "wrong_master_named")
    # The rogue state names c as its master, so c's commit of it is a master's commit, made without a quorum.
    assert names(violations) == {"one-master-per-term", "commit-quorum"}
    (v,) = [v for v in violations if v["invariant"] == "one-master-per-term"]
    assert v["invariant"] == "one-master-per-term"
    assert "name wrong_master_named/c as master" in v["detail"]
    assert v["examples"] and {e["state_uuid"] for e in v["examples"]} == {b.facts["rogue"].state_uuid}


def test_two_states_with_one_term_and_version(scenarios: dict[str, Any]) -> None:
    (v,), b = view(scenarios, "twin_states")
    assert v["invariant"] == "unique-state-per-version"
    assert {e["state_uuid"] for e in v["examples"]} == {b.facts["s3"].state_uuid, "twin-of-s3"}
    # The detail names both states, sorted, as the table's rows for that version hold them.
    uuids = ", ".join(sorted([b.facts["s3"].state_uuid, "twin-of-s3"]))
    assert f"term 1 version 3 has 2 different states: {uuids}" in v["detail"]
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
    violations, _ = view(scenarios, "committed_term_back")
    # The old state's commit is also one that no accepted event backs.
    assert names(violations) == {"committed-chain", "commit-quorum"}
    (v,) = [v for v in violations if v["invariant"] == "committed-chain"]
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
    last = v["examples"][-1]
    assert {k: last[k] for k in ("node", "seq", "type", "term", "version", "state_uuid")} == {
        "node": "term_back/c",
        "seq": b.hb.seq["term_back/c"],
        "type": "term",
        "term": 2,
        "version": None,
        "state_uuid": None,
    }
    assert last["file"].endswith("term_back/c/history-000001.jsonl")


def test_a_term_going_back_is_reported_once_across_a_bootstrap_seam(scenarios: dict[str, Any]) -> None:
    (v,), b = view(scenarios, "term_back_after_bootstrap")
    assert v["invariant"] == "node-monotonic"
    assert "term goes back from 3 to 1" in v["detail"]
    assert v["examples"][-1]["seq"] == b.hb.seq["term_back_after_bootstrap/c"]
    counts = scenarios["report"]["stats"]["violation_counts"]
    assert counts["node-monotonic"] == len(
        [v for v in scenarios["report"]["violations"] if v["invariant"] == "node-monotonic"]
    )


@pytest.mark.parametrize("chunk", [2, 5])
def test_a_history_cut_into_seq_ranges_gives_the_same_report(
    spark: SparkSession, scenarios: dict[str, Any], chunk: int
) -> None:
    """The window cuts each node's history into seq ranges and joins them on the driver. With ranges of a few
    seqs every seam of every scenario (gaps, reused seqs, terms and applies going back, applies before a
    commit, resets, cluster moves) falls at or near a range boundary: the report must not change."""
    spark.conf.set(CHUNK_SETTING, str(chunk))
    try:
        report = audit_dir(spark, scenarios["root"], max_violations=1000)
    finally:
        spark.conf.unset(CHUNK_SETTING)
    assert report["stats"]["violation_counts"] == scenarios["report"]["stats"]["violation_counts"]
    assert report["violations"] == scenarios["report"]["violations"]
    assert report["stats"] == scenarios["report"]["stats"]


def test_a_trimmed_prefix_is_not_a_gap_and_old_states_keep_their_verdicts(scenarios: dict[str, Any]) -> None:
    """Without the cut events, this history has holes at the start of a and c, applies of states whose
    master's commit is gone, and quorum members without an accepted event: all evidence deleted on purpose."""
    assert view(scenarios, "valid_trimmed_by_retention")[0] == []
    horizon = scenarios["report"]["stats"]["input"]["horizon"]
    mine = [h for h in horizon if h["cluster"] == "valid_trimmed_by_retention-cluster"]
    assert [(h["term"], h["version"]) for h in mine] == [(2, 9)]  # what a and c had accepted when they cut


def test_a_hole_above_the_first_kept_seq_is_still_a_gap(scenarios: dict[str, Any]) -> None:
    violations, b = view(scenarios, "trimmed_then_a_lost_middle")
    assert names(violations) == {"history-gap"}
    (v,) = violations
    assert f"seq jumps from {b.facts['lost'] - 1} to {b.facts['lost'] + 1}" in v["detail"]


def test_a_violation_beyond_the_horizon_is_still_caught(scenarios: dict[str, Any]) -> None:
    violations, b = view(scenarios, "trimmed_then_applied_uncommitted")
    assert names(violations) == {"applied-only-committed"}
    assert b.facts["state"].state_uuid in violations[0]["detail"]


def test_commit_without_quorum(scenarios: dict[str, Any]) -> None:
    (v,), b = view(scenarios, "no_quorum")
    assert v["invariant"] == "commit-quorum"
    (e,) = v["examples"]
    assert {k: e[k] for k in ("node", "seq", "type", "term", "version", "state_uuid", "quorum")} == {
        "node": "no_quorum/a",
        "seq": b.hb.seq["no_quorum/a"],
        "type": "committed",
        "term": 1,
        "version": 3,
        "state_uuid": b.facts["s3"].state_uuid,
        "quorum": ["no_quorum/a"],
    }
    assert e["last_accepted_config"] == ["no_quorum/a", "no_quorum/b", "no_quorum/c"]


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
    # Each example names its file and line (seq 4 was line 4 before it was cut out).
    assert [e["line"] for e in v["examples"]] == [3, 4]
    assert all(e["file"].endswith("seq_hole/b/history-000001.jsonl") for e in v["examples"])


def test_history_that_does_not_start_at_one_and_reused_seq(scenarios: dict[str, Any]) -> None:
    violations, b = view(scenarios, "seq_start_and_reuse")
    assert names(violations) == {"history-gap"}
    assert sorted(v["detail"] for v in violations) == [
        f"cluster seq_start_and_reuse-cluster: node seq_start_and_reuse/a: seq {b.hb.seq['seq_start_and_reuse/a']} "
        "is used twice",
        "cluster seq_start_and_reuse-cluster: node seq_start_and_reuse/c: history starts at seq 2, not 1",
    ]


def test_restart_continues_seq_in_a_new_segment(scenarios: dict[str, Any]) -> None:
    root: Path = scenarios["root"]
    segments = sorted((root / "valid_restart_single_node" / "0" / "valid_restart_single_node" / "s").glob("*.jsonl"))
    assert len(segments) == 2
    assert scenarios["report"]["stats"]["per_node"]["valid_restart_single_node/s"]["last_seq"] == 10


def test_a_master_commit_without_any_quorum(scenarios: dict[str, Any]) -> None:
    (v,), b = view(scenarios, "master_commit_without_quorum")
    assert v["invariant"] == "commit-quorum" and "with no quorum at all" in v["detail"]
    (e,) = v["examples"]
    assert (e["node"], e["type"], e["quorum"], e["state_uuid"]) == (
        "master_commit_without_quorum/a",
        "committed",
        None,
        b.facts["s3"].state_uuid,
    )


def test_quorum_is_checked_against_the_accepted_configurations(scenarios: dict[str, Any]) -> None:
    violations, _b = view(scenarios, "quorum_of_the_committing_event_only")
    # The committing event's own configurations differ from the accepted ones: that is a content conflict too.
    assert names(violations) == {"commit-quorum", "unique-state-per-version"}
    (v,) = [v for v in violations if v["invariant"] == "commit-quorum"]
    assert "not a majority of last_committed_config" in v["detail"] and "as its accepted events record" in v["detail"]
    assert "quorum_of_the_committing_event_only/e" in v["detail"]


def test_quorum_members_must_have_accepted(scenarios: dict[str, Any]) -> None:
    (v,), _ = view(scenarios, "quorum_member_never_accepted")
    assert v["invariant"] == "commit-quorum"
    assert "counting ['quorum_member_never_accepted/b'] in its quorum" in v["detail"]


def test_a_commit_only_followers_recorded_does_not_count(scenarios: dict[str, Any]) -> None:
    (v,), b = view(scenarios, "follower_only_commit")
    assert v["invariant"] == "applied-only-committed"
    assert "only followers recorded a commit" in v["detail"] and b.facts["s3"].state_uuid in v["detail"]
    assert {(e["node"], e["type"]) for e in v["examples"]} == {
        ("follower_only_commit/b", "committed"),
        ("follower_only_commit/b", "applied"),
    }


def test_apply_before_the_nodes_own_commit(scenarios: dict[str, Any]) -> None:
    (v,), b = view(scenarios, "apply_before_own_commit")
    assert v["invariant"] == "applied-only-committed"
    assert (
        "node apply_before_own_commit/b applied state" in v["detail"] and "without committing it first" in v["detail"]
    )
    (e,) = v["examples"]
    assert (e["node"], e["type"], e["state_uuid"]) == ("apply_before_own_commit/b", "applied", b.facts["s3"].state_uuid)


def test_stepped_down_term_goes_back(scenarios: dict[str, Any]) -> None:
    (v,), _ = view(scenarios, "stepped_down_term_back")
    assert v["invariant"] == "node-monotonic"
    assert "term goes back from 3 to 1" in v["detail"] and "(stepped_down)" in v["detail"]


@pytest.mark.parametrize(
    ("name", "field_"), [("same_uuid_other_parent", "parent_uuid"), ("same_uuid_other_configs", "last_accepted_config")]
)
def test_one_state_uuid_with_different_content(scenarios: dict[str, Any], name: str, field_: str) -> None:
    (v,), b = view(scenarios, name)
    assert v["invariant"] == "unique-state-per-version"
    assert f"state {b.facts['s3'].state_uuid} is recorded with different content ({field_} differ)" in v["detail"]
    assert len({repr(e[field_]) for e in v["examples"]}) == 2


def test_a_node_that_moves_to_another_cluster(scenarios: dict[str, Any]) -> None:
    (v,), b = view(scenarios, "node_changes_cluster")
    assert v["invariant"] == "node-cluster-stable"
    assert (
        "node node_changes_cluster/c: its events move from cluster node_changes_cluster-cluster to cluster "
        in v["detail"]
    )
    seq = b.hb.seq["node_changes_cluster/c"]
    assert [(e["seq"], e["cluster_uuid"]) for e in v["examples"]] == [
        (seq - 1, "node_changes_cluster-cluster"),
        (seq, "node_changes_cluster-elsewhere"),
    ]


def test_colliding_node_ids_are_kept_apart(scenarios: dict[str, Any]) -> None:
    per_node = scenarios["report"]["stats"]["per_node"]
    mine = {k: v for k, v in per_node.items() if k.startswith("valid_colliding_node_ids/")}
    assert len(mine) == 6  # three node ids in each of two clusters
    assert {v["cluster"] for v in mine.values()} == {"valid_colliding_node_ids-one", "valid_colliding_node_ids-two"}
    assert all(v["first_seq"] == 1 for v in mine.values())


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
