"""Damaged compressed history segments on the node: the frame check every reader goes through, the damage corpus
(tests/damage_corpus.py) against what the node reads at start and in the background, a start whose newest
segment is damaged, and a real node started on one (the message names the damage, nothing is deleted, no seq
is given twice)."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard
from damage_corpus import CASES, UNDAMAGED, Damage, base_history, damaged_history
from hypothesis import given, settings
from hypothesis import strategies as st
from test_history_maintenance import fake_statvfs, policy
from test_sidecar_security import wait_until

from coordinated.coordination.history import EventType, HistoryEvent
from coordinated.coordination.history_frames import DamagedSegment, decompress_checked, open_checked
from coordinated.sidecar.events.history import HistoryWriter, read_events_after, summarize_history
from coordinated.sidecar.events.history_maintenance import HistoryMaintenance
from coordinated.sidecar.events.history_read import UnreadableHistory, seq_bound
from coordinated.sidecar.events.history_segments import compress, list_segments, read_lines
from coordinated.tools.localcluster import LocalCluster

MB = 1 << 20
LINES = b"".join(b'{"seq":%d,"ts":%d.5,"node":"n1","type":"term","term":%d}\n' % (i, i, i) for i in range(1, 400))


def frame(data: bytes = LINES, checksum: bool = True) -> bytes:
    return zstandard.ZstdCompressor(level=3, write_checksum=checksum).compress(data)


# -- the frame check ---------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(checksum=st.booleans(), cut=st.floats(0.0, 0.999))
def test_every_cut_of_a_frame_is_damage_never_fewer_lines(checksum: bool, cut: float) -> None:
    whole = frame(checksum=checksum)
    with pytest.raises(DamagedSegment, match=r"truncated|empty"):
        decompress_checked(whole[: int(len(whole) * cut)])
    with pytest.raises(DamagedSegment, match=r"truncated|empty"):
        open_checked(io.BytesIO(whole[: int(len(whole) * cut)])).read()


@settings(max_examples=60, deadline=None)
@given(position=st.integers(0, 10_000), bit=st.integers(0, 7))
def test_a_flipped_bit_of_a_frame_with_a_checksum_is_damage_or_changes_nothing(position: int, bit: int) -> None:
    whole = bytearray(frame())
    whole[position % len(whole)] ^= 1 << bit
    try:
        content = decompress_checked(bytes(whole))
    except DamagedSegment:
        return
    # The frame header's unused bit is ignored by every decoder: the content is the same, never other lines.
    assert content == LINES


def test_whole_frames_read_one_after_the_other_with_or_without_a_checksum() -> None:
    assert decompress_checked(frame()) == LINES
    assert decompress_checked(frame(checksum=False)) == LINES
    assert open_checked(io.BytesIO(frame() + frame(b"more\n", checksum=False))).read() == LINES + b"more\n"
    # Read in small pieces, as a file is: the header may arrive a few bytes at a time.
    reader = open_checked(io.BufferedReader(io.BytesIO(frame()), buffer_size=1))  # type: ignore[arg-type]
    assert b"".join(iter(lambda: reader.read(7), b"")) == LINES
    with pytest.raises(DamagedSegment, match="no zstd frame starts at byte"):
        decompress_checked(frame() + b"trailing garbage")


def test_a_frame_that_declares_another_size_than_it_holds_is_damage() -> None:
    # A frame whose header says more content than its blocks hold (another tool's, or a flipped size field
    # in a frame without a checksum): its blocks decode, its size does not match.
    short = zstandard.ZstdCompressor(write_checksum=False).compress(LINES[:100])
    params = zstandard.get_frame_parameters(short)
    assert params.content_size == 100
    forged = bytearray(short)
    size_at = 5 + (1 if not (short[4] & 0x20) else 0)  # after the descriptor (and the window byte, if any)
    forged[size_at] = 101
    with pytest.raises(DamagedSegment, match=r"declares 101 bytes of content but holds 100|Data corruption"):
        decompress_checked(bytes(forged))


# -- the corpus against the node's readers ----------------------------------------------------------------


def base(node: str) -> HistoryEvent:
    return HistoryEvent(
        cluster_uuid="dba08b59c30f72e34195cd45451b181f",
        node=node,
        node_name="node-3",
        type=EventType.TERM,
        term=5,
        last_committed_config=(node,),
        last_accepted_config=(node,),
    )


def node_id(folder: Path) -> str:
    first = list_segments(folder)[0].path  # never the damaged one
    return str(json.loads(next(iter(read_lines(first))))["node"])


def start_and_check(folder: Path) -> HistoryMaintenance:
    """What the node does with its history at start: a writer, then one maintenance pass."""
    writer = HistoryWriter(folder, 4096)
    worker = HistoryMaintenance(
        writer, folder.parent, policy(max_size=64 * MB), lambda: base(node_id(folder)), statvfs=fake_statvfs(MB, MB)
    )
    writer.append(base(node_id(folder)))  # the node's first event of this start
    asyncio.run(worker.run_once())
    writer.close()
    return worker


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_the_node_names_each_damaged_segment_and_never_reads_it_as_fewer_events(tmp_path: Path, case: Damage) -> None:
    folder, damaged = damaged_history(tmp_path / "history", case)
    summary = summarize_history(folder)
    assert str(damaged) in summary.damaged and all(word in summary.damaged for word in case.words), summary
    before = {s.path.name for s in list_segments(folder)}
    worker = start_and_check(folder)
    problem = worker.status.history_problem
    # Checked whole in the background (a plain one once it is compressed): health names it.
    assert damaged.name in problem and all(word in problem for word in case.words), problem
    assert worker.status.damaged_segments == 1
    assert "while the node was running" not in problem and worker.status.lost_events == 0
    after = {s.path.name.removesuffix(".zst") for s in list_segments(folder)}
    assert {name.removesuffix(".zst") for name in before} <= after, "nothing was deleted"
    with pytest.raises(UnreadableHistory, match=str(damaged.name)):
        list(read_events_after(folder, 0))


def test_a_start_on_a_damaged_newest_segment_gives_no_seq_twice_and_records_the_skip(tmp_path: Path) -> None:
    (case,) = [c for c in CASES if c.newest]
    folder, damaged = damaged_history(tmp_path / "history", case)
    first_seq = int(damaged.name.split("-")[1].split(".")[0])
    worker = start_and_check(folder)
    segments = list_segments(folder)
    assert damaged in [s.path for s in segments] and not damaged.with_name(damaged.name[: -len(".zst")]).exists()
    newest = segments[-1]
    original = [s.first_seq for s in list_segments(base_history(tmp_path / "original"))]
    held = original[original.index(first_seq) + 1] - 1  # the damaged segment's last seq, before the damage
    assert newest.first_seq - 1 == seq_bound(damaged, first_seq, 4096) > held
    skipped, event = (json.loads(line) for line in read_lines(newest.path))
    assert skipped["type"] == "history_lost" and skipped["damaged_segment"] == damaged.name
    assert (skipped["first_lost_seq"], skipped["last_lost_seq"]) == (first_seq, newest.first_seq - 1)
    assert "truncated" in skipped["reason"] and skipped["seq"] == newest.first_seq
    assert event["seq"] == newest.first_seq + 1
    assert damaged.name in worker.status.history_problem and "truncated" in worker.status.history_problem
    assert "while the node was running" not in worker.status.history_problem
    # GET /_history after the skip reads on; from before it, the damaged segment is named.
    assert [json.loads(line)["seq"] for line in read_events_after(folder, newest.first_seq - 1)][:1] == [
        newest.first_seq
    ]
    with pytest.raises(UnreadableHistory, match="truncated"):
        list(read_events_after(folder, 0))


def test_an_undamaged_frame_without_a_checksum_reads_whole(tmp_path: Path) -> None:
    folder, _ = damaged_history(tmp_path / "history", UNDAMAGED)
    assert summarize_history(folder).damaged == ""
    assert start_and_check(folder).status.history_problem == ""
    seqs = [json.loads(line)["seq"] for line in read_events_after(folder, 0)]
    assert seqs == list(range(1, len(seqs) + 1))


# -- a real node -------------------------------------------------------------------------------------------


def test_a_node_started_on_a_cut_newest_segment_names_the_damage_and_goes_on(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = make_cluster(settings=None)
    (node,) = cluster.bootstrap(1)
    client = node.client()
    for i in range(30):
        client.put(f"k{i}", i)
    assert cluster.stop(node) == 0
    # Compressed, as a graceful stop leaves the open segment when the node has an archive.
    newest = compress(list_segments(node.data_dir / "history")[-1].path)
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 2])
    cluster.start(node.name)
    cluster.wait_http(node)
    cluster.wait_master(nodes=1)
    client = node.client()
    client.put("after", 1)

    def health_names_it() -> bool:
        return newest.name in (node.get("/_cluster/health")[1].get("history_problem") or "")

    wait_until(health_names_it, 30, "health names the damaged segment")
    health = node.get("/_cluster/health")[1]
    assert health["status"] == "yellow" and "truncated" in health["history_problem"], health
    assert "while the node was running" not in health["history_problem"]
    assert newest.exists() and not newest.with_name(newest.name[: -len(".zst")]).exists()
    log = node.log_path.read_text(errors="replace") if node.log_path else ""
    assert f"{newest} is truncated" in log and "was deleted" not in log
    status, body = node.get("/_history?after_seq=0")
    assert status == 500 and newest.name in body["error"]["reason"] and "truncated" in body["error"]["reason"]
    history = node.data_dir / "history"
    skip_from = min(s.first_seq for s in list_segments(history) if s.first_seq > int(newest.name[8:20]))
    after = [json.loads(line) for line in read_events_after(history, skip_from - 1)]
    assert after[0]["type"] == "history_lost" and after[0]["damaged_segment"] == newest.name
    assert [e["seq"] for e in after] == list(range(skip_from, skip_from + len(after))), "consecutive after the skip"
