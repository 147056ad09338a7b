from __future__ import annotations

import json
from pathlib import Path

from coordinated.sidecar.history import (
    HistoryWriter,
    list_segments,
    newest_durable_marks,
    read_events_after,
    summarize_history,
)


def event(kind: str = "term") -> dict[str, object]:
    return {"cluster_uuid": "u", "node": "n", "type": kind, "term": 1}


def seqs(directory: Path, after: int = 0) -> list[int]:
    return [json.loads(line)["seq"] for line in read_events_after(directory, after)]


def test_seq_starts_at_one_and_continues_after_restart(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path, 1 << 20)
    assert [writer.append(event())["seq"] for _ in range(3)] == [1, 2, 3]
    writer.close()
    writer = HistoryWriter(tmp_path, 1 << 20)
    assert writer.append(event())["seq"] == 4
    assert seqs(tmp_path) == [1, 2, 3, 4]
    assert seqs(tmp_path, after=2) == [3, 4]


def test_events_have_every_field(tmp_path: Path) -> None:
    written = HistoryWriter(tmp_path, 1 << 20).append(event("elected"))
    assert {"seq", "ts", "type", "node", "cluster_uuid", "term"} <= set(written)


def test_rotation_and_reads_across_segments(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path, 300)
    for _ in range(20):
        writer.append(event())
    writer.close()
    segments = list_segments(tmp_path)
    assert len(segments) > 3
    assert all(path.stat().st_size <= 300 for _, path in segments)
    assert seqs(tmp_path) == list(range(1, 21))
    assert seqs(tmp_path, after=17) == [18, 19, 20]
    assert HistoryWriter(tmp_path, 300).append(event())["seq"] == 21


def test_truncated_last_line_is_tolerated(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path, 1 << 20)
    for _ in range(3):
        writer.append(event())
    writer.close()
    _, path = list_segments(tmp_path)[-1]
    with path.open("ab") as file:
        file.write(b'{"seq": 4, "type": "acc')  # a crash in the middle of a write
    writer = HistoryWriter(tmp_path, 1 << 20)
    assert writer.truncated_segments == [path.name]
    assert writer.append(event())["seq"] == 4
    # The partial line stays the last line of its segment; the new event starts a new one.
    assert path.read_bytes().endswith(b'"acc')
    assert len(list_segments(tmp_path)) == 2
    assert seqs(tmp_path) == [1, 2, 3, 4]


def test_newest_durable_marks_are_the_highest_term_and_accepted_state(tmp_path: Path) -> None:
    assert newest_durable_marks(tmp_path) == (0, (0, 0))
    writer = HistoryWriter(tmp_path, 120)  # small segments: the marks span a rotation
    writer.append({"type": "term", "term": 3})
    writer.append({"type": "accepted", "term": 2, "version": 9})
    writer.append({"type": "accepted", "term": 3, "version": 4})
    writer.append({"type": "committed", "term": 3, "version": 7})  # neither a vote nor an ack: not a mark
    writer.append({"type": "elected", "term": 5})
    writer.close()
    assert len(list_segments(tmp_path)) > 1
    with (tmp_path / list_segments(tmp_path)[-1][1].name).open("ab") as segment:
        segment.write(b'{"type":"term","term":99')  # a crash cut the last line: it is not a mark
    assert newest_durable_marks(tmp_path) == (3, (3, 4))


def test_summary_reports_unreadable_lines_but_not_a_line_cut_by_a_crash(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path, 1 << 20)
    writer.append({"type": "term", "term": 2, "node": "n1"})
    writer.append({"type": "accepted", "term": 2, "version": 5, "node": "n1"})
    writer.close()
    segment = list_segments(tmp_path)[-1][1]
    segment.write_bytes(segment.read_bytes() + b'{"type":"term","term":9')
    clean = summarize_history(tmp_path)
    assert (clean.events, clean.term, clean.accepted, clean.node_ids, clean.damaged) == (2, 2, (2, 5), {"n1"}, "")
    segment.write_bytes(b"\x00\x00garbage\n" + segment.read_bytes())
    damaged = summarize_history(tmp_path)
    assert damaged.damaged == f"unreadable [{segment}] line 1"
    assert (damaged.term, damaged.accepted) == (2, (2, 5))


def test_a_line_is_one_compact_json_object_with_sorted_keys(tmp_path: Path) -> None:
    # The mark scan (`newest_durable_marks`) looks for `"type":"accepted"` byte for byte, and a reader splits
    # lines on newlines only: no spaces, one line per event, UTF-8 kept as is, odd values as strings.
    writer = HistoryWriter(tmp_path, 1 << 20)
    writer.append({"type": "accepted", "node_name": "pod-ä", "term": 2, "quorum": None, "where": tmp_path})
    writer.close()
    (line,) = (tmp_path / "segment-000000000001.jsonl").read_bytes().splitlines()
    assert line.startswith(b'{"node_name":"pod-\xc3\xa4","quorum":null,"seq":1,"term":2,"ts":')
    assert line.endswith(b',"type":"accepted","where":"%s"}' % str(tmp_path).encode())
    assert b" " not in line.replace(str(tmp_path).encode(), b"")
    assert list(json.loads(line)) == sorted(json.loads(line))


def test_each_rotation_reports_the_closed_segment(tmp_path: Path) -> None:
    closed: list[Path] = []
    writer = HistoryWriter(tmp_path, 300, on_segment_closed=closed.append)
    for _ in range(20):
        writer.append(event())
    assert closed == writer.closed_segments() == [path for _, path in list_segments(tmp_path)][:-1]
    assert writer.path == list_segments(tmp_path)[-1][1] and writer.path not in closed
    writer.close()
    # After a crash cut its last line, the old last segment is closed too: the writer starts a new one.
    with writer.path.open("ab") as file:
        file.write(b'{"seq": 99, "type": "acc')
    reopened = HistoryWriter(tmp_path, 300)
    assert reopened.closed_segments() == [*closed, writer.path]
