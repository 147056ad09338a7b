"""The archive's frontier (`coordinated.audit.frontier`): a follower's archive that is ahead of its master's is
audited up to what the master's archive settles, never reported as a violation; real violations below the
frontier still are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from audit_helpers import invariants_of
from pyspark.sql import SparkSession

from coordinated.audit.frontier import hold_back_unsettled
from coordinated.audit.reading import load
from coordinated.audit.run import audit
from coordinated.audit.synth import HistoryBuilder


def cluster_history(states: int) -> HistoryBuilder:
    hb = HistoryBuilder(["a", "b", "c"], "cluster-1")
    hb.elect("a", 1, ["b", "c"])
    for _ in range(states):
        hb.publish("a", ["b", "c"])
    return hb


def cut_master_before_its_last_commit(hb: HistoryBuilder) -> None:
    """The master's archive ends with the last state accepted: its commit is still in its open segment."""
    lines = hb.lines["a"]
    last = max(i for i, line in enumerate(lines) if '"type":"accepted"' in line)
    del lines[last + 1 :]


def audited(
    spark: SparkSession, hb: HistoryBuilder, directory: Path, *, hold_back: bool
) -> tuple[dict[str, Any], dict[str, int]]:
    hb.write(directory)
    inp = load(spark, [str(directory)])
    held: dict[str, int] = {}
    try:
        if hold_back:
            inp.events, held = hold_back_unsettled(inp.events)
            inp.scout = None
        return audit(spark, inp).report, held
    finally:
        inp.release()


def test_a_follower_ahead_of_its_masters_archive_is_held_back_not_a_violation(
    spark: SparkSession, tmp_path: Path
) -> None:
    hb = cluster_history(6)
    cut_master_before_its_last_commit(hb)
    raw, _ = audited(spark, hb, tmp_path / "raw", hold_back=False)
    assert "applied-only-committed" in invariants_of(raw), "the partial archive, audited as it is, looks unsafe"
    report, held = audited(spark, hb, tmp_path / "held", hold_back=True)
    assert report["ok"], report["violations"]
    assert held == {"cluster-1": 5}, "everything above the last version the master committed is held back"
    # Each node keeps a gapless prefix: the followers lose their events of version 6, the master its accepted.
    assert report["events"] == sum(len(lines) for lines in hb.lines.values()) - 1 - 2 * 3


def test_a_violation_below_the_frontier_is_still_found(spark: SparkSession, tmp_path: Path) -> None:
    hb = cluster_history(3)
    rogue = hb.make_state("a")
    hb.accept("b", rogue)
    hb.apply("b", rogue)  # b applies a state nobody committed...
    hb.publish("a", ["b", "c"], state=hb.make_state("a", version=rogue.version + 1))  # ...below the frontier
    report, held = audited(spark, hb, tmp_path / "h", hold_back=True)
    assert held == {}, "the master's archive reaches past the rogue version: it is judged"
    (violation,) = [v for v in report["violations"] if v["invariant"] == "applied-only-committed"]
    assert rogue.state_uuid in violation["detail"]


def test_a_state_its_master_abandoned_for_a_later_term_is_not_held_back(spark: SparkSession, tmp_path: Path) -> None:
    # As a bootstrap that lost the race: the node accepted its own state as master, then joined a later term.
    hb = cluster_history(2)
    abandoned = hb.make_state("a")
    hb.accept("a", abandoned)
    hb.elect("b", 2, ["a", "c"])
    report, held = audited(spark, hb, tmp_path / "h", hold_back=True)
    assert held == {}, "the master went on to term 2: it never commits that state"
    assert report["events"] == sum(len(lines) for lines in hb.lines.values())


def cut_follower_before_its_last_accept(hb: HistoryBuilder, follower: str) -> None:
    """The follower's archive ends before it accepted the last state: its `accepted` is still in its open
    segment, while the master's archive already holds the commit that counts it."""
    lines = hb.lines[follower]
    last = max(i for i, line in enumerate(lines) if '"type":"accepted"' in line)
    del lines[last:]


def test_a_master_ahead_of_a_voters_archive_is_held_back_not_a_violation(spark: SparkSession, tmp_path: Path) -> None:
    hb = cluster_history(6)
    cut_follower_before_its_last_accept(hb, "b")
    raw, _ = audited(spark, hb, tmp_path / "raw", hold_back=False)
    assert "commit-quorum" in invariants_of(raw), "the partial archive, audited as it is, looks unsafe"
    report, held = audited(spark, hb, tmp_path / "held", hold_back=True)
    assert report["ok"], report["violations"]
    assert held == {"cluster-1": 5}, "the state whose voter has not archived its accept yet is held back"


def test_a_voter_whose_archive_goes_on_without_the_accept_is_still_a_violation(
    spark: SparkSession, tmp_path: Path
) -> None:
    hb = cluster_history(2)
    state = hb.make_state("a")
    hb.accept("a", state)
    hb.accept("c", state)
    hb.commit("a", state, ("a", "b"))  # counts b, which never accepted it...
    hb.commit("c", state)
    hb.publish("a", ["b", "c"])  # ...and whose history goes on past that version
    report, held = audited(spark, hb, tmp_path / "h", hold_back=True)
    assert held == {}, "every voter's archive reaches past the version: it is judged"
    assert "commit-quorum" in invariants_of(report)


def stop_one_by_one(hb: HistoryBuilder) -> None:
    """The nodes stopped one at a time: c, then b, then the master. Left alone by c and b, the master publishes
    their departure, which only it accepts (no quorum is left), and stops with that publication open."""
    hb.stop("c")
    hb.stop("b")
    hb.accept("a", hb.make_state("a"))
    hb.stop("a")


def test_a_publication_its_master_could_not_commit_before_a_graceful_stop_is_settled(
    spark: SparkSession, tmp_path: Path
) -> None:
    hb = cluster_history(4)
    stop_one_by_one(hb)
    report, held = audited(spark, hb, tmp_path / "stopped", hold_back=True)
    assert held == {}, "a master that stopped in its term never commits that publication: nothing is held back"
    assert report["ok"], report["violations"]
    assert report["events"] == sum(len(lines) for lines in hb.lines.values())


def test_without_the_stop_the_same_open_publication_is_still_held_back(spark: SparkSession, tmp_path: Path) -> None:
    # As a crash leaves it, or a master still running: its commit may yet come, so the audit waits for it.
    hb = cluster_history(4)
    stop_one_by_one(hb)
    hb.lines["a"] = [line for line in hb.lines["a"] if '"type":"stopped"' not in line]
    report, held = audited(spark, hb, tmp_path / "crashed", hold_back=True)
    assert held == {"cluster-1": 4}, "the master's open publication of version 5 is held back"
    assert report["ok"], report["violations"]
