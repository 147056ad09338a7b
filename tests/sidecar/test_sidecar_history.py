from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from coordinated.coordination.history import EventType, HistoryEvent
from coordinated.sidecar.events.history import (
    HistoryWriter,
    list_segments,
    newest_durable_marks,
    read_events_after,
    summarize_history,
)
from coordinated.sidecar.events.history_read import last_seq_in
from coordinated.sidecar.events.history_segments import compress, expanded_lines

CONFIG = ("a" * 16, "b" * 16, "c" * 16)


def event(kind: str = "term") -> dict[str, object]:
    return {"cluster_uuid": "u", "node": "n", "type": kind, "term": 1}


def state_event(kind: EventType, version: int, *, master: str = "b" * 16, quorum: tuple[str, ...] | None = None):
    return HistoryEvent(
        cluster_uuid="cluster-1",
        node="a" * 16,
        node_name="node-a",
        type=kind,
        term=3,
        version=version,
        state_uuid=f"s{version}",
        parent_uuid=f"s{version - 1}",
        master=master,
        last_committed_config=CONFIG,
        last_accepted_config=CONFIG,
        quorum=quorum,
    )


def seqs(directory: Path, after: int = 0) -> list[int]:
    return [json.loads(line)["seq"] for line in read_events_after(directory, after)]


def events(directory: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in read_events_after(directory, 0)]


def test_seq_starts_at_one_and_continues_after_restart(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path, 1 << 20)
    assert [writer.append_fields(event()) for _ in range(3)] == [1, 2, 3]
    writer.close()
    writer = HistoryWriter(tmp_path, 1 << 20)
    assert writer.append_fields(event()) == 4
    assert seqs(tmp_path) == [1, 2, 3, 4]
    assert seqs(tmp_path, after=2) == [3, 4]
    # Every start writes into a segment of its own, named after its first seq.
    assert [s.first_seq for s in list_segments(tmp_path)] == [1, 4]


def test_a_start_that_writes_nothing_leaves_no_segment(tmp_path: Path) -> None:
    HistoryWriter(tmp_path, 1 << 20).close()
    assert list_segments(tmp_path) == []


def test_rotation_and_reads_across_segments(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path, 300)
    for _ in range(20):
        writer.append_fields(event())
    writer.close()
    segments = list_segments(tmp_path)
    assert len(segments) > 3
    assert all(path.stat().st_size <= 300 for _, path in segments)
    assert seqs(tmp_path) == list(range(1, 21))
    assert seqs(tmp_path, after=17) == [18, 19, 20]
    assert HistoryWriter(tmp_path, 300).append_fields(event()) == 21


def test_format_2_leaves_out_what_did_not_change_and_reads_back_as_format_1(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path, 1 << 20)
    written = [
        state_event(EventType.ACCEPTED, 7),
        state_event(EventType.COMMITTED, 7, master="a" * 16, quorum=CONFIG[:2]),
        state_event(EventType.ACCEPTED, 8),
    ]
    for e in written:
        writer.append(e)
    writer.close()
    first, second, third = (json.loads(line) for line in list_segments(tmp_path)[0].path.read_bytes().splitlines())
    assert first["format"] == 2 and first["cluster_uuid"] == "cluster-1" and first["last_accepted_config"]
    assert "cluster_uuid" not in second and "last_accepted_config" not in second and "node_name" not in second
    assert second["master"] == "a" * 16  # changed: written
    assert third["master"] == "b" * 16 and "format" not in third
    # Every reader sees format 1: every field, `null` where there is none, no `format`.
    read = events(tmp_path)
    assert [{k: v for k, v in e.items() if k not in ("seq", "ts")} for e in read] == [
        json.loads(json.dumps(e.to_dict())) for e in written
    ]


def test_a_followers_commit_and_apply_are_one_line_and_two_events(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path, 1 << 20)
    writer.append(state_event(EventType.ACCEPTED, 7))
    assert writer.append(state_event(EventType.APPLIED, 7), folds_commit=True) == 3
    assert writer.append_fields(event()) == 4
    writer.close()
    lines = list_segments(tmp_path)[0].path.read_bytes().splitlines()
    assert len(lines) == 3 and json.loads(lines[1])["committed"] is True
    read = events(tmp_path)
    assert [(e["seq"], e["type"]) for e in read] == [(1, "accepted"), (2, "committed"), (3, "applied"), (4, "term")]
    committed, applied = read[1], read[2]
    assert {k: v for k, v in committed.items() if k not in ("seq", "type")} == {
        k: v for k, v in applied.items() if k not in ("seq", "type")
    }
    assert last_seq_in(list_segments(tmp_path)[0].path)[:2] == (4, False)


def test_compressed_segments_read_like_plain_ones(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path, 400)
    writer.append_fields({"node": "n", "type": "term", "term": 5})
    for version in range(1, 12):
        writer.append(state_event(EventType.ACCEPTED, version))
        writer.append(state_event(EventType.APPLIED, version), folds_commit=True)
    writer.close()
    before = events(tmp_path)
    for segment in list_segments(tmp_path):
        compress(segment.path)
    assert all(s.compressed for s in list_segments(tmp_path))
    assert events(tmp_path) == before
    assert [e["seq"] for e in before] == list(range(1, len(before) + 1))
    summary = summarize_history(tmp_path)
    assert (summary.term, summary.accepted, summary.events, summary.damaged) == (5, (3, 11), len(before), "")
    # A restart continues after the last seq in the (compressed) last segment, in a new segment.
    assert HistoryWriter(tmp_path, 400).append_fields(event()) == len(before) + 1


def test_truncated_last_line_is_tolerated(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path, 1 << 20)
    for _ in range(3):
        writer.append_fields(event())
    writer.close()
    _, path = list_segments(tmp_path)[-1]
    with path.open("ab") as file:
        file.write(b'{"seq": 4, "type": "acc')  # a crash in the middle of a write
    writer = HistoryWriter(tmp_path, 1 << 20)
    assert writer.truncated_segments == [path.name]
    assert writer.append_fields(event()) == 4
    # The partial line stays the last line of its segment; the new event starts a new one.
    assert path.read_bytes().endswith(b'"acc')
    assert len(list_segments(tmp_path)) == 2
    assert seqs(tmp_path) == [1, 2, 3, 4]


def test_a_segment_holding_only_a_cut_line_is_not_appended_to(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path, 1 << 20)
    writer.append_fields(event())
    writer.close()
    (tmp_path / "segment-000000000002.jsonl").write_bytes(b'{"format":2,"node":"n","seq":2,"ty')  # cut at once
    assert HistoryWriter(tmp_path, 1 << 20).append_fields(event()) == 2
    assert seqs(tmp_path) == [1, 2]
    assert summarize_history(tmp_path).damaged == ""


def test_newest_durable_marks_are_the_highest_term_and_accepted_state(tmp_path: Path) -> None:
    assert newest_durable_marks(tmp_path) == (0, (0, 0))
    writer = HistoryWriter(tmp_path, 200)  # small segments: the marks span a rotation
    writer.append_fields({"type": "term", "term": 3})
    writer.append_fields({"type": "accepted", "term": 2, "version": 9})
    writer.append_fields({"type": "accepted", "term": 3, "version": 4})
    writer.append_fields({"type": "committed", "term": 3, "version": 7})  # neither a vote nor an ack: not a mark
    writer.append_fields({"type": "elected", "term": 5})
    writer.close()
    assert len(list_segments(tmp_path)) > 1
    with list_segments(tmp_path)[-1].path.open("ab") as segment:
        segment.write(b'{"type":"term","term":99')  # a crash cut the last line: it is not a mark
    assert newest_durable_marks(tmp_path) == (3, (3, 4))


def test_summary_reports_unreadable_lines_but_not_a_line_cut_by_a_crash(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path, 1 << 20)
    writer.append_fields({"type": "term", "term": 2, "node": "n1"})
    writer.append_fields({"type": "accepted", "term": 2, "version": 5, "node": "n1"})
    writer.close()
    segment = list_segments(tmp_path)[-1][1]
    segment.write_bytes(segment.read_bytes() + b'{"type":"term","term":9')
    clean = summarize_history(tmp_path)
    assert (clean.events, clean.term, clean.accepted, clean.node_ids, clean.damaged) == (2, 2, (2, 5), {"n1"}, "")
    segment.write_bytes(b"\x00\x00garbage\n" + segment.read_bytes())
    damaged = summarize_history(tmp_path)
    assert damaged.damaged == f"unreadable [{segment}] line 1"
    assert (damaged.term, damaged.accepted) == (2, (2, 5))


@pytest.mark.parametrize(
    "line",
    [
        b'{"node":"n1","seq":3,"type":"detached","term":0,"marks_term":-1,"marks_accepted":[2,5]}',
        b'{"node":"n1","seq":3,"type":"retention_cut","term":2,"marks_term":2,"marks_accepted":[2,-5]}',
        b'{"node":"n1","seq":3,"type":"term","term":9223372036854775808}',
    ],
)
def test_a_mark_outside_the_wires_range_is_damage_not_a_mark(tmp_path: Path, line: bytes) -> None:
    writer = HistoryWriter(tmp_path, 1 << 20)
    writer.append_fields({"type": "term", "term": 2, "node": "n1"})
    writer.append_fields({"type": "accepted", "term": 2, "version": 5, "node": "n1"})
    writer.close()
    segment = list_segments(tmp_path)[-1].path
    segment.write_bytes(segment.read_bytes() + line + b"\n")
    summary = summarize_history(tmp_path)
    assert summary.damaged == f"unreadable [{segment}] line 3"
    assert (summary.term, summary.accepted) == (2, (2, 5))


def test_damage_inside_a_well_formed_line_is_reported_at_startup(tmp_path: Path) -> None:
    # A changed byte can leave `{...}` around a line that is no event any more: every line is decoded.
    writer = HistoryWriter(tmp_path, 1 << 20)
    for _ in range(3):
        writer.append_fields(event())
    writer.close()
    segment = list_segments(tmp_path)[0].path
    lines = segment.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"seq":2', b'"seq":"2')
    segment.write_bytes(b"".join(lines))
    assert summarize_history(tmp_path).damaged == f"unreadable [{segment}] line 2"


def test_marks_survive_in_older_segments_being_gone_when_a_loss_restates_them(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path, 1 << 20, check_interval_s=0)
    writer.append_fields({"node": "n", "type": "term", "term": 7})
    writer.append_fields({"node": "n", "type": "accepted", "term": 7, "version": 30})
    doomed = list_segments(tmp_path)[0].path
    doomed.unlink()  # deleted under the running node
    writer.append_fields({"node": "n", "type": "elected", "term": 7})
    writer.close()
    lost = [e for e in events(tmp_path) if e["type"] == "history_lost"]
    assert [(e["first_lost_seq"], e["last_lost_seq"], e["seq"]) for e in lost] == [(1, 2, 3)]
    assert lost[0]["marks_term"] == 7 and lost[0]["marks_accepted"] == [7, 30]
    assert "was deleted while the node was running" in lost[0]["reason"]
    assert (writer.losses[0].first_seq, writer.losses[0].last_seq) == (1, 2)
    assert not doomed.exists()  # nothing more was written into the unlinked file
    assert newest_durable_marks(tmp_path) == (7, (7, 30))


def test_a_replaced_open_segment_is_not_written_into(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path, 1 << 20, check_interval_s=0)
    writer.append_fields(event())
    segment = list_segments(tmp_path)[0].path
    replacement = tmp_path / "other"
    replacement.write_bytes(b"")
    os.replace(replacement, segment)  # another file now has the segment's name
    writer.append_fields(event())
    writer.close()
    assert segment.read_bytes() == b""
    assert "replaced by another file" in writer.losses[0].reason
    assert [e["type"] for e in events(tmp_path)] == ["history_lost", "term"]


def test_a_failed_write_is_cut_back_and_recorded_as_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writer = HistoryWriter(tmp_path, 1 << 20)
    writer.append_fields(event())
    real_write = os.write

    def full_disk(fd: int, data: bytes) -> int:
        real_write(fd, bytes(data)[:10])  # part of the line reaches the file, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full_disk)
    assert writer.append_fields(event()) == 2
    assert "No space left on device" in writer.write_failure
    monkeypatch.setattr(os, "write", real_write)
    assert writer.append_fields(event()) == 4  # seq 3 records the loss of seq 2
    writer.close()
    assert writer.write_failure == ""
    read = events(tmp_path)
    assert [(e["seq"], e["type"]) for e in read] == [(1, "term"), (3, "history_lost"), (4, "term")]
    assert (read[1]["first_lost_seq"], read[1]["last_lost_seq"]) == (2, 2)
    assert summarize_history(tmp_path).damaged == ""  # the partial line was cut back off


def test_expanded_lines_name_damaged_lines(tmp_path: Path) -> None:
    segment = tmp_path / "segment-000000000001.jsonl"
    segment.write_bytes(b'{"format":2,"node":"n","seq":1}\nnot json\n')
    lines = list(expanded_lines(segment))
    assert [(line.number, line.events is None) for line in lines] == [(1, False), (2, True)]


def test_rotate_closes_the_open_segment_once_and_the_next_event_starts_a_new_one(tmp_path: Path) -> None:
    # A graceful stop closes the open segment so that the archive can take it (after its compression).
    closed: list[Path] = []
    writer = HistoryWriter(tmp_path, 1 << 20, on_rotate=closed.append)
    writer.rotate()  # nothing written yet: nothing to close
    writer.append_fields(event())
    first = list_segments(tmp_path)[0].path
    writer.rotate()
    writer.rotate()  # already closed
    assert closed == [first] and writer.open_segment is None
    writer.append_fields(event())
    writer.close()
    assert [segment.first_seq for segment in list_segments(tmp_path)] == [1, 2]
