"""Reset events of `coordinated node-tool` (unsafe_bootstrap, detached): the audit judges a node's history
across one as a new epoch, exactly there, and lists every reset in the report.

Each valid scenario has a twin without its reset event, which must show the violations the reset excuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from audit_helpers import audit_builder, invariants_of, remove_settings
from pyspark.sql import SparkSession

from coordinated.audit.synth import HistoryBuilder, State
from coordinated.coordination.offline_recovery import MUST_JOIN_ELECTED_MASTER

OLD, NEW = "old-cluster", "new-cluster"


def reset_event(hb: HistoryBuilder, node: str, kind: str, cluster: str, term: int, state: State, old: State) -> None:
    """Append the node tool's event to `node`'s history, as `offline_recovery` writes it."""
    hb.seq[node] += 1
    event = {
        "cluster_uuid": cluster,
        "cluster_uuid_committed": kind == "unsafe_bootstrap",
        "node": node,
        "seq": hb.seq[node],
        "ts": hb.ts,
        "type": kind,
        "term": state.term,
        "version": state.version,
        "state_uuid": state.state_uuid,
        "parent_uuid": state.parent_uuid,
        "master": None,
        "last_committed_config": list(state.last_committed_config),
        "last_accepted_config": list(state.last_accepted_config),
        "quorum": None,
        "current_term": term,
        "previous_cluster_uuid": OLD,
        "previous_term": old.term,
        "previous_version": old.version,
        "previous_state_uuid": old.state_uuid,
        "marks_term": min(term, hb.term[node]),
        "marks_accepted": list(min((old.term, old.version), (state.term, state.version))),
    }
    hb.lines[node].append(json.dumps(event))
    hb.tick(1.0)


def unsafe_bootstrap(hb: HistoryBuilder, survivor: str, *, record: bool = True) -> State:
    """The survivor's state becomes the first state of the new cluster, with the survivor as sole voter."""
    old = hb.accepted[survivor]
    assert old is not None
    state = State(old.term, old.version + 1, hb.new_uuid(), old.state_uuid, "", (survivor,), (survivor,))
    if record:
        reset_event(hb, survivor, "unsafe_bootstrap", NEW, hb.term[survivor], state, old)
    hb.cluster_uuid = NEW
    hb.accepted[survivor] = state
    hb.restart(survivor)
    return state


def old_cluster(hb: HistoryBuilder, nodes: list[str]) -> None:
    hb.elect(nodes[0], 1, nodes[1:])
    for _ in range(3):
        hb.publish(nodes[0], nodes[1:])


def survivor_and_two_new_nodes(record: bool, *, fork: bool = False) -> HistoryBuilder:
    """a, b, c form the old cluster; b and c are lost for good; a is unsafe-bootstrapped; d, e join it."""
    hb = HistoryBuilder(["a", "b", "c", "d", "e"], OLD)
    old_cluster(hb, ["a", "b", "c"])
    old_state = hb.accepted["a"]
    root = unsafe_bootstrap(hb, "a", record=record)
    hb.elect("a", 2)
    first = hb.make_state("a", parent=old_state if fork else root, config=("a",), last_committed_config=("a",))
    hb.publish("a", [], state=first)
    grown = hb.make_state("a", config=("a", "d", "e"), last_committed_config=("a",))
    hb.publish("a", ["d", "e"], state=grown)
    hb.publish("a", ["d", "e"])
    return hb


def detached_node_joins(record: bool, *, term_back_after: bool = False) -> HistoryBuilder:
    """a, b, c form the old cluster; b had voted in term 6 (a failed election) while a stayed in term 1; c is
    lost; a is unsafe-bootstrapped and elected in term 2 of the new cluster; b is detached and joins it."""
    hb = HistoryBuilder(["a", "b", "c"], OLD)
    old_cluster(hb, ["a", "b", "c"])
    hb.start_term(6, ["b"])
    unsafe_bootstrap(hb, "a")
    hb.elect("a", 2)
    hb.publish("a", [])
    b_old = hb.accepted["b"]
    assert b_old is not None
    must_join = MUST_JOIN_ELECTED_MASTER.node_ids
    detached = State(0, b_old.version, hb.new_uuid(), b_old.state_uuid, "", must_join, must_join)
    if record:
        reset_event(hb, "b", "detached", OLD, 0, detached, b_old)
    hb.restart("b")
    # b joins a's term while its record still names the old cluster's UUID (not committed), then accepts.
    hb.term["b"] = 2
    hb.emit("b", "term", 2, cluster_uuid=OLD)
    grown = hb.make_state("a", config=("a", "b"), last_committed_config=("a",))
    hb.publish("a", ["b"], state=grown)
    hb.publish("a", ["b"])
    if term_back_after:  # within the new epoch the term must not go back again
        hb.emit("b", "term", 1)
    return hb


def settings_removed_everywhere(record: bool) -> HistoryBuilder:
    """a, b, c form a cluster and stop; `node-tool remove-settings` rewrites each one's copy of its last state (same
    term and version, a new uuid whose parent is the old copy); they restart and a is elected and publishes."""
    hb = HistoryBuilder(["a", "b", "c"], OLD)
    old_cluster(hb, ["a", "b", "c"])
    for node in ("a", "b", "c"):
        remove_settings(hb, node, record=record)
    hb.elect("a", 2, ["b", "c"])
    hb.publish("a", ["b", "c"])
    hb.publish("a", ["b", "c"])
    return hb


@pytest.fixture(scope="module")
def reports(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    scenarios = {
        "bootstrap": survivor_and_two_new_nodes(True),
        "bootstrap-unrecorded": survivor_and_two_new_nodes(False),
        "bootstrap-fork": survivor_and_two_new_nodes(True, fork=True),
        "detach": detached_node_joins(True),
        "detach-unrecorded": detached_node_joins(False),
        "detach-term-back": detached_node_joins(True, term_back_after=True),
        "settings-removed": settings_removed_everywhere(True),
        "settings-removed-unrecorded": settings_removed_everywhere(False),
    }
    return {name: audit_builder(spark, hb, tmp_path_factory.mktemp(name)) for name, hb in scenarios.items()}


def test_unsafe_bootstrap_of_a_survivor_joined_by_two_new_nodes_is_valid(reports: dict[str, Any]) -> None:
    report = reports["bootstrap"]
    assert report["violations"] == [] and report["ok"] is True
    (reset,) = report["resets"]
    assert (reset["node"], reset["type"]) == ("a", "unsafe_bootstrap")
    assert (reset["previous_cluster_uuid"], reset["cluster_uuid"]) == (OLD, NEW)
    assert (reset["previous_term_version"], reset["term_version"]) == ([1, 3], [1, 4])


def test_moving_to_a_new_cluster_without_the_reset_event_is_a_violation(reports: dict[str, Any]) -> None:
    report = reports["bootstrap-unrecorded"]
    assert invariants_of(report) == {"node-cluster-stable"}
    assert report["resets"] == []


def test_the_unsafe_bootstrapped_state_is_the_root_of_the_new_committed_chain(reports: dict[str, Any]) -> None:
    # The new master's first state names the old cluster's state as parent, skipping the bootstrapped one.
    report = reports["bootstrap-fork"]
    assert invariants_of(report) == {"committed-chain"}
    assert NEW in report["violations"][0]["detail"]


def test_a_detached_node_joining_the_new_cluster_is_valid(reports: dict[str, Any]) -> None:
    report = reports["detach"]
    assert report["violations"] == [] and report["ok"] is True
    assert [(r["node"], r["type"]) for r in report["resets"]] == [("a", "unsafe_bootstrap"), ("b", "detached")]
    detached = report["resets"][1]
    assert (detached["previous_cluster_uuid"], detached["cluster_uuid"]) == (OLD, OLD)
    assert detached["term_version"] == [0, 3] and detached["current_term"] == 0


def test_joining_another_cluster_without_detach_is_a_violation(reports: dict[str, Any]) -> None:
    report = reports["detach-unrecorded"]
    assert invariants_of(report) == {"node-monotonic", "node-cluster-stable"}
    assert all(v["examples"] for v in report["violations"])


def test_a_reset_excuses_only_the_term_going_back_across_it(reports: dict[str, Any]) -> None:
    report = reports["detach-term-back"]
    assert invariants_of(report) == {"node-monotonic"}
    # Reported where it happens (and, as for any node, again where its piece joins the one before).
    assert any(
        ("b", "term", 1) in [(e["node"], e["type"], e["term"]) for e in v["examples"]] for v in report["violations"]
    )


def test_settings_removed_on_every_node_is_valid(reports: dict[str, Any]) -> None:
    """Three copies of one (term, version) under new uuids are no second state of that version, and the new
    master's first state descends, through its own copy, from the last committed state."""
    report = reports["settings-removed"]
    assert report["violations"] == [] and report["ok"] is True


def test_a_rewritten_copy_without_its_event_breaks_the_committed_chain(reports: dict[str, Any]) -> None:
    report = reports["settings-removed-unrecorded"]
    assert invariants_of(report) == {"committed-chain"}
    assert "a state no node recorded" in report["violations"][0]["detail"]


def test_reset_events_are_in_the_text_and_html_report(spark: SparkSession, tmp_path: Path) -> None:
    from coordinated.audit.cli import main

    detached_node_joins(True).write(tmp_path / "history")
    code = main([str(tmp_path / "history"), "--report-dir", str(tmp_path / "report"), "--spark-master", "local[2]"])
    assert code == 0
    html = (tmp_path / "report" / "audit-report.html").read_text()
    assert "Operator resets" in html and "detached" in html and "unsafe_bootstrap" in html
