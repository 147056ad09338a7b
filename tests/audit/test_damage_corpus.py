"""The damage corpus (tests/damage_corpus.py) against `coordinated audit`: every damaged segment is unusable input,
exit 2 naming the file and the damage, never a violation; the undamaged history and a frame without a checksum
audit ok. Then the crash-cut histories of earlier releases: a hole that is a cut line's own seq is no gap."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from audit_helpers import audit_dir, invariants_of
from damage_corpus import CASES, STORED, UNDAMAGED, Damage, base_history, damaged_history
from pyspark.sql import SparkSession

from coordinated.audit.cli import main
from coordinated.sidecar.events.history import HistoryWriter
from coordinated.sidecar.events.history_segments import compress, expanded_lines, list_segments

pytestmark = pytest.mark.spark


def run(history: Path, tmp_path: Path) -> int:
    return main([str(history), "--report-dir", str(tmp_path / "report"), "--no-html"])


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_a_damaged_segment_exits_2_naming_the_file_and_the_damage(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: Damage
) -> None:
    _node, damaged = damaged_history(tmp_path / "history", case)
    assert run(tmp_path / "history", tmp_path) == 2
    err = capsys.readouterr().err
    assert "unusable input" in err and str(damaged) in err, err
    for word in case.words:
        assert word in err, (word, err)
    assert "Traceback" not in err and "\tat org.apache" not in err
    assert not (tmp_path / "report").exists(), "no verdict, so no report"


def test_the_corpus_history_audits_ok_also_with_a_frame_without_a_checksum(spark: SparkSession, tmp_path: Path) -> None:
    """The control: the corpus's history, one of its segments in a frame another tool wrote without a checksum
    (read whole, its end still checked), audits ok with every event."""
    node, _ = damaged_history(tmp_path / "history", UNDAMAGED)
    report = audit_dir(spark, tmp_path / "history")
    assert report["ok"], report["violations"]
    stored = sum(len(path.read_bytes().splitlines()) for path in STORED.rglob("segment-*"))
    assert report["events"] == stored - 1, "every stored event (the stored crash-cut line is none)"
    assert report["stats"]["per_node"] and node.name == "node-3"


# -- crash-cut lines of earlier releases -------------------------------------------------------------------


def _cut_history(tmp_path: Path, *, cut: bool, missing: int = 1) -> Path:
    """The stored history, its node-1 split again: segment 1 ends with its `missing` last events gone, the last of
    them cut in half there (`cut`) or gone without a trace, and the next segment starts right after them, at seq
    21: what a machine crash leaves of a segment's end after the node wrote on in the next one. The events lost
    are node-1's `applied` of version 7 (seq 20), and its `committed` (seq 19) with `missing=2`."""
    history = tmp_path / "history"
    shutil.copytree(STORED, history)
    segment = history / "node-1" / "segment-000000000001.jsonl"
    lines = segment.read_bytes().splitlines(keepends=True)[:-1]  # the stored cut line goes
    assert [json.loads(line)["seq"] for line in lines] == list(range(1, 22))
    (history / "node-1" / "segment-000000000021.jsonl").write_bytes(lines[20])
    kept, lost = lines[: 20 - missing], lines[19]
    segment.write_bytes(b"".join(kept) + (lost[: len(lost) // 2] if cut else b""))
    return history


def test_a_crash_cut_last_line_whose_seq_the_next_segment_skips_audits_ok(spark: SparkSession, tmp_path: Path) -> None:
    report = audit_dir(spark, _cut_history(tmp_path, cut=True))
    assert report["ok"], report["violations"]
    (note,) = report["stats"]["input"]["truncated_lines"]
    assert note["source"].endswith("node-1/segment-000000000001.jsonl") and note["line"] == 20


def test_a_hole_without_a_cut_line_or_wider_than_one_line_is_still_a_gap(spark: SparkSession, tmp_path: Path) -> None:
    gone = audit_dir(spark, _cut_history(tmp_path / "a", cut=False))
    assert invariants_of(gone) == {"history-gap"}, gone["violations"]
    assert "seq jumps from 19 to 21" in gone["violations"][0]["detail"]
    wider = audit_dir(spark, _cut_history(tmp_path / "b", cut=True, missing=2))  # two seqs: not one line's
    assert "history-gap" in invariants_of(wider), wider["violations"]
    (gap,) = [v for v in wider["violations"] if v["invariant"] == "history-gap"]
    assert "seq jumps from 18 to 21" in gap["detail"]


def _skipped_history(tmp_path: Path, *, named: bool) -> Path:
    """node-3 stopped gracefully with an archive (its last segment compressed), that segment then cut on disk, and
    the node started again: it skips past every seq the segment can hold and records the skip, then stops. The
    folder then gets the archive's whole copy of the segment back, as an audit of the archive reads it. With
    `named=False` the skip's event does not name the damaged segment (an ordinary loss)."""
    node = base_history(tmp_path / "history")
    newest = compress(list_segments(node)[-1].path)
    last = [event for line in expanded_lines(newest) for event in line.events or ()][-1]
    whole = newest.read_bytes()
    newest.write_bytes(whole[: len(whole) // 2])
    writer = HistoryWriter(node, 4096)
    identity = ("cluster_uuid", "node", "node_name", "last_committed_config", "last_accepted_config")
    writer.append_fields({k: last[k] for k in identity} | {"type": "stopped", "term": last["term"]})
    writer.close()
    newest.write_bytes(whole)
    skipped = list_segments(node)[-1].path
    lines = skipped.read_bytes().splitlines(keepends=True)
    lost = json.loads(lines[0])
    assert lost["type"] == "history_lost" and lost["damaged_segment"] == newest.name
    if not named:
        del lost["damaged_segment"]
        skipped.write_bytes(json.dumps(lost).encode() + b"\n" + b"".join(lines[1:]))
    return tmp_path / "history"


def test_seqs_skipped_past_a_damaged_segment_are_no_gap_beside_its_whole_copy(
    spark: SparkSession, tmp_path: Path
) -> None:
    report = audit_dir(spark, _skipped_history(tmp_path / "named", named=True))
    assert report["ok"], report["violations"]
    unnamed = audit_dir(spark, _skipped_history(tmp_path / "unnamed", named=False))
    assert invariants_of(unnamed) == {"history-gap"}, unnamed["violations"]
