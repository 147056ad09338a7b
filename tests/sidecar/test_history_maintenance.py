"""Retention, compression and the watch over the history's files and the data volume (history_maintenance)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import msgspec
import pytest
from test_sidecar_storage import state_with

from coordinated.coordination.history import EventType, HistoryEvent
from coordinated.coordination.settings import SettingsError
from coordinated.sidecar.events.history import HistoryWriter, read_events_after, summarize_history
from coordinated.sidecar.events.history_maintenance import HistoryMaintenance, volume_usage
from coordinated.sidecar.events.history_read import read_history_summary
from coordinated.sidecar.events.history_retention import ClosedSegment, VolumeUsage, plan_cut
from coordinated.sidecar.events.history_segments import list_segments
from coordinated.sidecar.events.history_settings import RetentionPolicy
from coordinated.sidecar.node_settings import sidecar_registry
from coordinated.sidecar.storage.persistence import HISTORY_DIR, DataDirError, FilePersistedState
from coordinated.sidecar.storage.state_store import DB_FILE

MB = 1 << 20
GB = 1 << 30


def policy(max_size: int = 64 * 1024, max_age_s: float = 0, segment_size: int = 4096) -> RetentionPolicy:
    return RetentionPolicy(
        max_size=max_size, max_age_s=max_age_s, high_watermark=0.85, flood_stage=0.95, segment_size=segment_size
    )


def parsed_policy(**raw: str) -> RetentionPolicy:
    return RetentionPolicy.from_settings(sidecar_registry().parse({"node.name": "n1", **raw}))


def test_the_history_settings_parse_with_their_bounds_and_rule() -> None:
    default = parsed_policy()
    assert (default.max_size, default.max_age_s, default.segment_size) == (256 * MB, 7 * 86400, 16 * MB)
    assert (default.high_watermark, default.flood_stage) == (0.85, 0.95)
    # A watermark as a percentage or a ratio; no age limit; a segment never above a quarter of the retention.
    custom = parsed_policy(
        **{
            "history.disk.watermark.high": "0.5",
            "history.disk.watermark.flood_stage": "70%",
            "history.retention.max_age": "0s",
            "history.retention.max_size": "1mb",
        }
    )
    assert (custom.high_watermark, custom.flood_stage, custom.max_age_s, custom.segment_size) == (0.5, 0.7, 0, MB // 4)
    for name, value, problem in [
        ("history.disk.watermark.high", "100%", "below 100%"),
        ("history.disk.watermark.high", "lots", "expected a percentage"),
        ("history.segment_size", "1kb", "[4kb]"),
        ("history.retention.max_size", "8kb", "[16kb]"),
        ("history.retention.max_age", "0", "such as 500ms"),
    ]:
        with pytest.raises(SettingsError, match=rf"\[{name}\].*{re.escape(problem)}"):
            parsed_policy(**{name: value})
    with pytest.raises(SettingsError, match=r"\[history.disk.watermark.high\] \(95%\) must be below"):
        parsed_policy(**{"history.disk.watermark.high": "95%", "history.disk.watermark.flood_stage": "90%"})


def base(node: str = "n1") -> HistoryEvent:
    return HistoryEvent(
        cluster_uuid="c1",
        node=node,
        node_name="node-1",
        type=EventType.TERM,
        term=2,
        last_committed_config=("n1",),
        last_accepted_config=("n1",),
    )


def fill(writer: HistoryWriter, events: int, first_version: int = 1, node: str = "n1") -> None:
    for version in range(first_version, first_version + events):
        writer.append(
            msgspec.structs.replace(
                base(node), type=EventType.APPLIED, version=version, state_uuid=f"s{version:08d}", master="n1"
            )
        )


def events(directory: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in read_events_after(directory, 0)]


def fake_statvfs(total: int, available: int, reserved: int = 0):
    return lambda _path: SimpleNamespace(
        f_blocks=total // 4096, f_frsize=4096, f_bavail=available // 4096, f_bfree=(available + reserved) // 4096
    )


def test_a_volume_is_as_full_as_df_says_not_counting_the_blocks_reserved_for_root() -> None:
    # A host disk seen on a CI machine: 252 GB, 55 GB used, 37 GB available, 160 GB reserved. df says 60%.
    volume = volume_usage(Path("/data"), fake_statvfs(252 * GB, 37 * GB, reserved=160 * GB))
    assert volume is not None and volume.used == 55 * GB and volume.usable == 92 * GB
    assert round(volume.used_share, 2) == 0.6
    # No reserved blocks: used over the whole size, as before.
    assert volume_usage(Path("/data"), fake_statvfs(100 * GB, 10 * GB)).used_share == 0.9  # type: ignore[union-attr]


def test_the_flood_stage_frees_down_to_the_high_watermark_of_what_the_node_can_use() -> None:
    # 100 MB used of 100 MB usable (plus 100 MB reserved for root): 100% full, 15 MB must go to reach 85%.
    segments = [closed(1, 10 * MB), closed(11, 10 * MB), closed(21, 10 * MB)]
    volume = VolumeUsage(total=200 * MB, available=0, free=100 * MB)
    cut = plan_cut(segments, 0, 31, 0.0, policy(max_size=1000 * MB), volume, lambda path: True)
    assert cut is not None and [s.first_seq for s in cut.delete] == [1, 11]


def closed(first_seq: int, size: int, mtime: float = 0.0) -> ClosedSegment:
    return ClosedSegment(first_seq, Path(f"segment-{first_seq:012d}.jsonl.zst"), size, mtime)


# -- the decision ------------------------------------------------------------------------------------------


def test_the_oldest_segments_beyond_the_size_go_as_a_prefix() -> None:
    segments = [closed(1, 40), closed(11, 40), closed(21, 40)]
    cut = plan_cut(segments, 30, 31, 0.0, policy(max_size=100), None)
    assert cut is not None
    assert [s.first_seq for s in cut.delete] == [1, 11] and cut.first_kept_seq == 21
    assert cut.reason == "history.retention.max_size"
    assert plan_cut(segments, 0, 31, 0.0, policy(max_size=120), None) is None


def test_age_counts_from_the_last_write_of_a_segment() -> None:
    segments = [closed(1, 10, mtime=0.0), closed(11, 10, mtime=500.0)]
    cut = plan_cut(segments, 10, 21, 1000.0, policy(max_size=MB, max_age_s=600), None)
    assert cut is not None and cut.first_kept_seq == 11 and cut.reason == "history.retention.max_age"


def test_with_an_archive_only_archived_segments_go_and_never_past_one_that_is_not() -> None:
    segments = [closed(1, 40), closed(11, 40), closed(21, 40)]
    archived = {segments[0].path, segments[2].path}
    cut = plan_cut(segments, 30, 31, 0.0, policy(max_size=50), None, lambda path: path in archived)
    assert cut is not None and [s.first_seq for s in cut.delete] == [1] and cut.first_kept_seq == 11


def test_past_the_flood_stage_the_history_gives_way_whatever_the_archive_says() -> None:
    segments = [closed(1, 40 * MB), closed(11, 40 * MB), closed(21, 40 * MB)]
    volume = VolumeUsage(total=1000 * MB, available=40 * MB)  # 96% used
    cut = plan_cut(segments, 0, 31, 0.0, policy(max_size=1000 * MB), volume, lambda path: False)
    assert cut is not None
    # Down to the high watermark (85%): 110 MB must go, three segments of 40 MB.
    assert [s.first_seq for s in cut.delete] == [1, 11, 21] and cut.unarchived == 3
    assert "history.disk.watermark.flood_stage" in cut.reason
    assert plan_cut(segments, 0, 31, 0.0, policy(max_size=1000 * MB), VolumeUsage(1000 * MB, 100 * MB)) is None


# -- the node's passes -------------------------------------------------------------------------------------


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def maintenance(writer: HistoryWriter, data_dir: Path, **kwargs: object) -> HistoryMaintenance:
    kwargs.setdefault("statvfs", fake_statvfs(1000 * MB, 900 * MB))
    return HistoryMaintenance(writer, data_dir, kwargs.pop("retention", policy()), base, **kwargs)  # type: ignore[arg-type]


def test_closed_segments_are_compressed_and_announced_once_durable(tmp_path: Path) -> None:
    announced: list[Path] = []
    writer = HistoryWriter(tmp_path / HISTORY_DIR, 4096)
    worker = maintenance(writer, tmp_path, on_segment_closed=lambda path: announced.append(path) or None)
    fill(writer, 200)
    before = events(tmp_path / HISTORY_DIR)
    run(worker.run_once())
    segments = list_segments(tmp_path / HISTORY_DIR)
    assert [s.compressed for s in segments] == [True] * (len(segments) - 1) + [False]  # the open one stays plain
    assert announced == [s.path for s in segments[:-1]] and all(path.exists() for path in announced)
    assert events(tmp_path / HISTORY_DIR) == before
    compressed = sum(s.path.stat().st_size for s in segments[:-1])
    assert compressed * 4 < 4096 * (len(segments) - 1)
    run(worker.run_once())
    assert len(announced) == len(segments) - 1  # once per segment


def test_a_cut_is_recorded_first_and_the_audit_boundary_is_exact(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path / HISTORY_DIR, 4096, marks=(2, (2, 7)))
    worker = maintenance(writer, tmp_path, retention=policy(max_size=16 * 1024))
    fill(writer, 3000)
    run(worker.run_once())
    kept = events(tmp_path / HISTORY_DIR)
    (cut,) = [e for e in kept if e["type"] == "retention_cut"]
    first = list_segments(tmp_path / HISTORY_DIR)[0].first_seq
    assert cut["first_kept_seq"] == first == kept[0]["seq"] > 1
    assert (cut["marks_term"], cut["marks_accepted"]) == (2, [2, 7])
    assert "history.retention.max_size" in cut["reason"]
    assert [e["seq"] for e in kept] == list(range(first, first + len(kept)))
    total = sum(s.path.stat().st_size for s in list_segments(tmp_path / HISTORY_DIR))
    assert total <= 16 * 1024 + 512  # the limit, plus the cut's own event written after the decision
    assert worker.status.cuts == 1 and worker.status.first_kept_seq == first


def test_the_high_watermark_makes_health_warn(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path / HISTORY_DIR, 4096)
    worker = maintenance(writer, tmp_path, statvfs=fake_statvfs(1000 * MB, 120 * MB))
    run(worker.run_once())
    assert "88% full" in worker.status.disk_problem and "history.disk.watermark.high" in worker.status.disk_problem


def test_a_closed_segment_deleted_under_the_node_is_recorded_as_lost(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path / HISTORY_DIR, 4096)
    worker = maintenance(writer, tmp_path)
    fill(writer, 120)
    run(worker.run_once())
    victim = list_segments(tmp_path / HISTORY_DIR)[1]
    after = list_segments(tmp_path / HISTORY_DIR)[2].first_seq
    victim.path.unlink()
    run(worker.run_once())
    lost = [e for e in events(tmp_path / HISTORY_DIR) if e["type"] == "history_lost"]
    assert [(e["first_lost_seq"], e["last_lost_seq"]) for e in lost] == [(victim.first_seq, after - 1)]
    assert worker.status.lost_events == after - victim.first_seq
    assert victim.path.name in worker.status.history_problem


def test_a_damaged_compressed_segment_is_reported(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path / HISTORY_DIR, 4096)
    fill(writer, 120)
    run(maintenance(writer, tmp_path).run_once())
    writer.close()
    victim = list_segments(tmp_path / HISTORY_DIR)[0].path
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    again = HistoryWriter(tmp_path / HISTORY_DIR, 4096)
    worker = maintenance(again, tmp_path)
    run(worker.run_once())
    assert worker.status.damaged_segments == 1 and victim.name in worker.status.history_problem


# -- the startup rule with a trimmed history ---------------------------------------------------------------


class Crash(Exception):
    pass


@contextlib.contextmanager
def crash_on_unlink(after: int) -> Iterator[None]:
    """The process dies in the middle of a cut: after `after` segments were deleted."""
    real = Path.unlink
    calls = {"n": 0}

    def unlink(self: Path, missing_ok: bool = False) -> None:
        if self.name.startswith("segment-") and self.name.endswith(".zst"):
            calls["n"] += 1
            if calls["n"] > after:
                raise Crash
        real(self, missing_ok=missing_ok)

    Path.unlink = unlink  # type: ignore[method-assign]
    try:
        yield
    finally:
        Path.unlink = real  # type: ignore[method-assign]


@pytest.mark.parametrize("crash_after", [None, 1])
def test_the_startup_rule_holds_when_retention_deleted_the_marks(tmp_path: Path, crash_after: int | None) -> None:
    """The segments holding the newest `term` and `accepted` events are cut (or a crash stops the cut half
    way): the `retention_cut` event restates the marks, so a database rolled back to before them refuses."""
    persisted = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    history = tmp_path / HISTORY_DIR
    writer = HistoryWriter(history, 4096)
    persisted.set_current_term(3)
    writer.append_fields({"node": persisted.node_id, "type": "term", "term": 3})
    older = (tmp_path / DB_FILE).read_bytes()
    persisted.set_last_accepted_state(state_with(5, {}, term=3))
    writer.append_fields({"node": persisted.node_id, "type": "accepted", "term": 3, "version": 5})
    fill(writer, 3000, node=persisted.node_id)  # many segments after the marks
    first_segment = list_segments(history)[0].path
    worker = HistoryMaintenance(
        writer, tmp_path, policy(max_size=16 * 1024), lambda: base(persisted.node_id), statvfs=fake_statvfs(MB, MB // 2)
    )
    if crash_after is None:
        run(worker.run_once())
    else:
        with crash_on_unlink(crash_after), pytest.raises(Crash):
            run(worker.run_once())
    writer.close()
    persisted.close()
    assert not first_segment.exists()
    assert any(e["type"] == "retention_cut" for e in events(history))
    summary = summarize_history(history)
    assert (summary.term, summary.accepted, summary.damaged) == (3, (3, 5), "")
    loaded = FilePersistedState(tmp_path, "c", read_history=read_history_summary)  # the intact database loads
    assert loaded.last_accepted_state.version == 5
    loaded.close()
    (tmp_path / DB_FILE).write_bytes(older)
    for suffix in ("-wal", "-shm"):
        (tmp_path / (DB_FILE + suffix)).unlink(missing_ok=True)
    with pytest.raises(DataDirError, match="acknowledged write was lost"):
        FilePersistedState(tmp_path, "c", read_history=read_history_summary)


# -- a real small volume -----------------------------------------------------------------------------------


@pytest.fixture
def small_volume(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs, unmounted afterwards: a full disk for real."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = tmp_path / "volume"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_on_a_full_volume_writes_fail_without_harm_and_the_flood_stage_frees_space(small_volume: Path) -> None:
    history = small_volume / HISTORY_DIR
    writer = HistoryWriter(history, 8192)
    worker = HistoryMaintenance(
        writer, small_volume, policy(max_size=MB, segment_size=8192), base, is_archived=lambda path: False
    )
    fill(writer, 300)
    run(worker.run_once())
    ballast = small_volume / "ballast"
    with ballast.open("wb") as file, contextlib.suppress(OSError):
        while True:  # everything else fills the volume
            file.write(b"\0" * 65536)
            file.flush()
    fill(writer, 50, first_version=301)
    assert "No space left on device" in writer.write_failure
    run(worker.run_once())  # past the flood stage: closed segments go though the archive lacks them
    assert worker.status.unarchived_deleted > 0 and worker.status.cuts == 1
    assert "flood_stage" in worker.status.disk_problem
    ballast.unlink()
    fill(writer, 1, first_version=351)
    assert writer.write_failure == ""
    kept = events(history)
    lost = [e for e in kept if e["type"] == "history_lost"]
    assert lost and "No space left on device" in str(lost[0]["reason"])
    assert summarize_history(history).damaged == ""
