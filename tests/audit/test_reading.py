"""Input handling: malformed lines (file and line named), truncated last lines, empty input, splits."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import zstandard
from audit_helpers import audit_dir, invariants_of
from pyspark.sql import SparkSession

from coordinated.audit.reading import UnusableInput, detect_format, read_jsonl_lines
from coordinated.audit.synth import HistoryBuilder, SynthConfig, generate
from coordinated.sidecar.events.history import HistoryWriter, list_segments
from coordinated.sidecar.events.history_segments import compress

STORED_FORMAT1 = Path(__file__).parent / "data" / "format1-history"


def small() -> HistoryBuilder:
    hb = HistoryBuilder(["a", "b", "c"], "cluster-1", seed=5)
    hb.elect("a", 1, ["b", "c"])
    for _ in range(3):
        hb.publish("a", ["b", "c"])
    return hb


def test_malformed_line_in_the_middle_names_file_and_line(spark: SparkSession, tmp_path: Path) -> None:
    hb = small()
    hb.write(tmp_path / "h")
    seg = tmp_path / "h" / "b" / "history-000001.jsonl"
    lines = seg.read_text().splitlines()
    lines.insert(4, '{"cluster_uuid": "cluster-1", "node": "b", "seq": ')  # becomes line 5
    lines.insert(2, "")  # a blank line still counts as a line: the bad one is now line 6
    seg.write_text("\n".join(lines) + "\n")
    with pytest.raises(UnusableInput) as err:
        audit_dir(spark, tmp_path / "h")
    assert f"{seg}:6: not a JSON object" in str(err.value)
    report = audit_dir(spark, tmp_path / "h", skip_malformed=True)
    assert report["ok"] and report["malformed_lines"] == 1
    assert report["events"] == sum(hb.seq.values())


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ('{"cluster_uuid":"cluster-1","node":"b","seq":"seven","type":"term","term":1}', "not a JSON object"),
        ('{"cluster_uuid":"cluster-1","node":"b","type":"term","term":1}', "missing field(s): seq"),
        ('{"cluster_uuid":"cluster-1","node":"b","seq":9,"type":"accepted","term":1}', "version, state_uuid"),
        ('{"cluster_uuid":"cluster-1","node":"b","seq":9,"type":"voted","term":1}', "unknown event type voted"),
        ("[1, 2, 3]", "not a JSON object"),
    ],
)
def test_kinds_of_malformed_lines(spark: SparkSession, tmp_path: Path, bad: str, reason: str) -> None:
    small().write(tmp_path / "h")
    seg = tmp_path / "h" / "c" / "history-000001.jsonl"
    lines = seg.read_text().splitlines()
    seg.write_text("\n".join([*lines[:3], bad, *lines[3:]]) + "\n")
    with pytest.raises(UnusableInput, match=rf"{seg}:4: .*{reason}".replace("(", r"\(").replace(")", r"\)")):
        audit_dir(spark, tmp_path / "h")


def test_line_numbers_across_file_splits(spark: SparkSession, tmp_path: Path) -> None:
    """A file read as several splits (several tasks) still gets exact line numbers."""
    hb = generate(SynthConfig(events=3000, seed=4, nodes=3, p_restart=0.0, p_crash=0.0))
    hb.write(tmp_path / "h")
    seg = tmp_path / "h" / "node-1" / "history-000001.jsonl"
    lines = seg.read_text().splitlines()
    assert len(lines) > 800
    lines.insert(700, "garbage")  # line 701, in a later split than the first
    seg.write_text("\n".join(lines) + "\n")
    assert seg.stat().st_size > 3 * 65536
    spark.conf.set("spark.sql.files.maxPartitionBytes", "65536")
    try:
        with pytest.raises(UnusableInput, match=rf"{seg}:701: "):
            audit_dir(spark, tmp_path / "h")
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")


def test_cut_last_line_is_noted_and_takes_no_seq(spark: SparkSession, tmp_path: Path) -> None:
    """A crash cut a's last event short; after the restart a's next event has the seq the cut one had."""
    hb = small()
    cut = hb.seq["a"] + 1
    hb.restart("a")
    hb.elect("b", 2, ["a", "c"])
    hb.publish("b", ["a", "c"])
    hb.write(tmp_path / "h")
    first = tmp_path / "h" / "a" / "history-000001.jsonl"
    assert (tmp_path / "h" / "a" / "history-000002.jsonl").exists()
    with first.open("a") as fh:
        fh.write(f'{{"cluster_uuid":"cluster-1","node":"a","seq":{cut},"ts":17000')
    report = audit_dir(spark, tmp_path / "h")
    assert report["ok"], report["violations"]
    assert report["malformed_lines"] == 0
    (note,) = report["stats"]["input"]["truncated_lines"]
    assert note["source"] == str(first) and note["line"] == cut and note["node"] == "a"
    assert report["stats"]["per_node"]["a"]["truncated_lines"] == 1


def test_an_earlier_releases_history_audits_ok_and_continues_in_format_2(spark: SparkSession, tmp_path: Path) -> None:
    """A format-1 history written by the previous release (stored in tests/audit/data): 3 nodes, writes, and
    node-1 killed while writing, so its first segment ends in a cut line and its next seq starts a new
    segment. It audits as ok; then this release's writer continues node-1 in format 2, its closed segments
    are compressed, and the mixed history still audits as ok."""
    history = tmp_path / "history"
    shutil.copytree(STORED_FORMAT1, history)
    report = audit_dir(spark, history)
    assert report["ok"], report["violations"]
    (note,) = report["stats"]["input"]["truncated_lines"]
    assert note["source"].endswith("node-1/segment-000000000001.jsonl") and note["line"] == 22
    node1 = history / "node-1"
    last = json.loads(list_segments(node1)[-1].path.read_bytes().splitlines()[-1])
    writer = HistoryWriter(node1, 1 << 20)
    assert writer.append_fields({**last, "type": "term", "term": last["term"] + 1}) == last["seq"] + 1
    writer.close()
    for segment in list_segments(node1)[:-1]:
        compress(segment.path)
    assert [s.compressed for s in list_segments(node1)] == [True, True, False]
    again = audit_dir(spark, history)
    assert again["ok"], again["violations"]
    assert again["events"] == report["events"] + 1
    assert [n["line"] for n in again["stats"]["input"]["truncated_lines"]] == [22]


def _sidecar_history(directory: Path, crash_after: int) -> tuple[list[dict[str, object]], str]:
    """A one-node history written by the sidecar's own writer, killed while appending an event: the event's
    JSON made it to the file but its newline did not. The writer is then reopened, as a restart does."""
    hb = HistoryBuilder(["s"], "cluster-s", seed=3)
    hb.elect("s", 1)
    for _ in range(4):
        hb.publish("s", [])
    events = [json.loads(line) for line in hb.lines["s"]]
    for e in events:
        del e["seq"], e["ts"]
    writer = HistoryWriter(directory, segment_size=1 << 20)
    for e in events[:crash_after]:
        writer.append_fields(e)
    lost = {**events[crash_after], "seq": writer.last_seq + 1, "ts": 1.0}
    writer.close()
    (_, segment), *_ = list_segments(directory)
    with segment.open("ab") as fh:
        fh.write(json.dumps(lost, separators=(",", ":"), sort_keys=True).encode())  # no newline
    writer = HistoryWriter(directory, segment_size=1 << 20)
    assert writer.truncated_segments == [segment.name]
    for e in events[crash_after:]:
        writer.append_fields(e)
    writer.close()
    return events, str(segment)


def test_a_whole_last_line_without_its_newline_is_a_cut_line(spark: SparkSession, tmp_path: Path) -> None:
    """The sidecar's writer and the audit share one definition: the writer gives the cut event's seq to the
    next event, so the audit must not count the cut line as an event (it would see that seq twice)."""
    events, segment = _sidecar_history(tmp_path / "h" / "s", crash_after=5)
    report = audit_dir(spark, tmp_path / "h")
    assert report["ok"], report["violations"]
    assert report["events"] == len(events)
    (note,) = report["stats"]["input"]["truncated_lines"]
    assert note["source"] == segment and note["line"] == 6 and note["node"] == "s"


def test_a_bad_last_line_with_its_newline_is_malformed(spark: SparkSession, tmp_path: Path) -> None:
    """Only the bytes after the last newline are a cut line; a complete line that is no event is malformed."""
    small().write(tmp_path / "h")
    seg = tmp_path / "h" / "b" / "history-000001.jsonl"
    lines = seg.read_text().splitlines()
    seg.write_text("\n".join([*lines, '{"cluster_uuid":"cluster-1","node":"b","se']) + "\n")
    with pytest.raises(UnusableInput, match=rf"{seg}:{len(lines) + 1}: "):
        audit_dir(spark, tmp_path / "h")


def test_hole_after_a_complete_segment_is_still_a_gap(spark: SparkSession, tmp_path: Path) -> None:
    """The same hole without the truncated line: nothing explains it."""
    hb = small()
    hb.restart("a")
    hb.seq["a"] += 1
    hb.elect("b", 2, ["a", "c"])
    hb.publish("b", ["a", "c"])
    hb.write(tmp_path / "h")
    report = audit_dir(spark, tmp_path / "h")
    assert invariants_of(report) == {"history-gap"}
    assert report["stats"]["input"]["truncated_lines"] == []


def test_truncated_line_in_the_middle_of_a_segment_is_malformed(spark: SparkSession, tmp_path: Path) -> None:
    small().write(tmp_path / "h")
    seg = tmp_path / "h" / "a" / "history-000001.jsonl"
    lines = seg.read_text().splitlines()
    seg.write_text("\n".join([lines[0], lines[1][:40], *lines[2:]]) + "\n")
    with pytest.raises(UnusableInput, match=rf"{seg}:2: "):
        audit_dir(spark, tmp_path / "h")


def test_empty_files_audit_to_zero_events(spark: SparkSession, tmp_path: Path) -> None:
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "history-000001.jsonl").write_text("")
    (tmp_path / "h" / "history-000002.jsonl").write_text("\n\n")
    report = audit_dir(spark, tmp_path / "h")
    assert report["ok"] and report["events"] == 0 and report["nodes"] == 0 and report["malformed_lines"] == 0


def test_missing_path_and_empty_folder_are_unusable(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(UnusableInput, match="cannot read"):
        audit_dir(spark, tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UnusableInput, match="no history files"):
        audit_dir(spark, tmp_path / "empty")


def test_events_before_bootstrap_join_their_cluster(spark: SparkSession, tmp_path: Path) -> None:
    """Term-1 events carry "_na_"; they must count with the cluster the nodes later bootstrap."""
    hb = small()
    assert '"cluster_uuid":"_na_"' in hb.lines["a"][1] and '"type":"elected"' in hb.lines["a"][1]
    hb.write(tmp_path / "h")
    report = audit_dir(spark, tmp_path / "h")
    assert report["ok"] and report["stats"]["clusters"] == ["cluster-1"]
    assert report["stats"]["elections"]["count"] == 1


def test_format_detection(tmp_path: Path) -> None:
    (tmp_path / "j").mkdir()
    (tmp_path / "j" / "x.jsonl").write_text("{}\n")
    (tmp_path / "p" / "cluster=c").mkdir(parents=True)
    (tmp_path / "p" / "cluster=c" / "part-0.parquet").write_bytes(b"PAR1")
    assert detect_format([str(tmp_path / "j")]) == "jsonl"
    assert detect_format([str(tmp_path / "p")]) == "parquet"
    assert detect_format(["s3a://bucket/h/*.jsonl"]) == "jsonl"
    with pytest.raises(UnusableInput, match="mix"):
        detect_format([str(tmp_path / "j"), str(tmp_path / "p")])


def test_parquet_rows_are_checked_and_scouted_by_the_audits_first_pass(spark: SparkSession, tmp_path: Path) -> None:
    """Parquet input has no pass of its own for malformed rows and the scout (time range, resets, the nodes the
    states name): the state table's pass observes them. A bad row still fails the audit naming its file, is
    counted with --skip-malformed, and the report's figures equal those of the same history as JSONL."""
    from pyspark.sql import functions as F

    from coordinated.audit.schema import EVENT_SCHEMA

    hb = small()
    hb.write(tmp_path / "h")
    events = spark.read.schema(EVENT_SCHEMA).option("recursiveFileLookup", "true").json(str(tmp_path / "h"))
    good = tmp_path / "pq-good"
    events.coalesce(1).write.parquet(str(good))
    bad = tmp_path / "pq-bad"
    odd = events.filter(F.col("seq") == 2).limit(1).withColumn("type", F.lit("bogus"))
    events.unionByName(odd).coalesce(1).write.parquet(str(bad))

    as_jsonl = audit_dir(spark, tmp_path / "h")
    as_parquet = audit_dir(spark, good)
    assert as_parquet["ok"] and as_parquet["events"] == as_jsonl["events"]
    for key in ("time_range", "terms", "elections", "failover_gaps", "commit_latencies"):
        assert as_parquet["stats"][key] == as_jsonl["stats"][key], key
    assert as_parquet["missing_histories"] == as_jsonl["missing_histories"]
    figures = ("events", "first_seq", "last_seq", "first_ts", "last_ts", "elections", "applied")
    assert {n: {k: v[k] for k in figures} for n, v in as_parquet["stats"]["per_node"].items()} == {
        n: {k: v[k] for k in figures} for n, v in as_jsonl["stats"]["per_node"].items()
    }

    with pytest.raises(UnusableInput, match=r"malformed row in .*\.parquet: unknown event type bogus \(1 such rows\)"):
        audit_dir(spark, bad)
    skipped = audit_dir(spark, bad, skip_malformed=True)
    assert skipped["malformed_lines"] == 1 and skipped["ok"] and skipped["events"] == as_jsonl["events"]


def test_many_small_segments_are_read_in_a_few_tasks_and_a_bad_line_is_still_named(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Nodes that rotate small segments (restarts, a small `history.segment_size`) leave many files: they are
    expanded in batches, a few tasks in all, so that every pass over the cached events runs that few; a bad
    line is still named by its segment and its line there."""
    hb = HistoryBuilder(["a", "b", "c"], "cluster-1", seed=5)
    hb.elect("a", 1, ["b", "c"])
    for _ in range(40):
        hb.publish("a", ["b", "c"])
    history = tmp_path / "history"
    for node, lines in hb.lines.items():
        writer = HistoryWriter(history / node, 1 << 10)  # a segment every few events
        for line in lines:
            event = json.loads(line)
            del event["seq"], event["ts"]
            writer.append_fields(event)
        writer.close()
    closed = [s.path for node in "abc" for s in list_segments(history / node)[:-1]]
    assert len(closed) > 30
    for path in closed:
        compress(path)
    lines, _ = read_jsonl_lines(spark, [str(history)])
    assert lines.rdd.getNumPartitions() <= max(2, spark.sparkContext.defaultParallelism)
    report = audit_dir(spark, history)
    assert report["ok"], report["violations"]
    assert report["events"] == sum(hb.seq.values())

    victim = list_segments(history / "b")[5].path  # closed and compressed, in the middle of a batch
    text = zstandard.decompress(victim.read_bytes()).splitlines(keepends=True)
    victim.write_bytes(zstandard.compress(b"".join([*text[:2], b'{"node": "b", "seq": \n', *text[2:]])))
    with pytest.raises(UnusableInput, match=rf"{victim}:3: not a JSON object"):
        audit_dir(spark, history)
