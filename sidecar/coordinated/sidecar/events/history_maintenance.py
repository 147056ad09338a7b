"""What the running node does for its history besides writing it: compression, retention, watching the
files and the data volume. One pass every few seconds, and one soon after each segment closes.

Each pass:
1. removes what a crash in the middle of a compression left (a `.tmp`, a plain file beside its `.zst`);
2. compresses every closed plain segment (in a worker thread: the event loop keeps serving), then calls
   `on_segment_closed(path)` with the durable `segment-N.jsonl.zst`, on the event loop;
3. checks every compressed segment once per process (in the thread): its frames whole and its format one this
   release reads (`history_segments.verify_compressed`), so damage in a segment the startup check did not read
   is reported soon after the start, and a segment just compressed is proven readable;
4. notices segments deleted or replaced under the node (and the open one, see `HistoryWriter`) and records
   each loss in the history;
5. reads the data volume's usage (`statvfs`) and applies the retention (`history_retention.plan_cut`): the
   `retention_cut` event first, made durable, then the segments, oldest first. A crash in the middle leaves
   the event and some of the segments: the next pass deletes the rest, and the event already says where the
   history starts.

The interface for an archive (the `s3` side): `on_segment_closed(path)` is called once per closed segment,
after its compressed file is durable (also for segments a restart finds still uncompressed or compressed but
not announced in this process: an uploader must be idempotent). `is_archived(path) -> bool` decides whether
retention may delete a segment; without it the oldest segments beyond the retention are deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from coordinated.coordination.history import EventType, HistoryEvent
from coordinated.sidecar.events.history import HistoryLoss, HistoryWriter
from coordinated.sidecar.events.history_retention import ClosedSegment, Cut, VolumeUsage, plan_cut
from coordinated.sidecar.events.history_segments import (
    Segment,
    compress,
    leftover_files,
    list_segments,
    verify_compressed,
)
from coordinated.sidecar.events.history_settings import RetentionPolicy
from coordinated.sidecar.storage.durable_files import fsync_dir

log = logging.getLogger("coordinated.history")
PASS_INTERVAL_S = 5.0
# Space kept for the history's own events on a full volume: released to write the `retention_cut` event that
# must come before the segments it frees, made again once there is room. A dot file: no reader looks at it.
RESERVE_FILE = ".reserve"
RESERVE_BYTES = 64 * 1024


@dataclass(frozen=True)
class HistoryStatus:
    """The history and the data volume as the last pass saw them, for health and metrics."""

    history_bytes: int = 0
    segments: int = 0
    volume: VolumeUsage | None = None
    disk_problem: str = ""  # the volume is past the high watermark (health: yellow)
    history_problem: str = ""  # lost, damaged or unwritable history (health: yellow)
    cuts: int = 0
    deleted_bytes: int = 0
    unarchived_deleted: int = 0
    lost_events: int = 0
    damaged_segments: int = 0
    first_kept_seq: int | None = None  # of the last cut


@dataclass
class _Counters:
    cuts: int = 0
    deleted_bytes: int = 0
    unarchived_deleted: int = 0
    first_kept_seq: int | None = None
    damaged: dict[str, str] = field(default_factory=dict)  # segment name -> what is wrong


def volume_usage(path: Path, statvfs: Callable[[Path], os.statvfs_result] = os.statvfs) -> VolumeUsage | None:
    try:
        stats = statvfs(path)
    except OSError:
        return None
    return VolumeUsage(
        total=stats.f_blocks * stats.f_frsize,
        available=stats.f_bavail * stats.f_frsize,
        free=stats.f_bfree * stats.f_frsize,
    )


class HistoryMaintenance:
    def __init__(
        self,
        writer: HistoryWriter,
        data_dir: Path,
        policy: RetentionPolicy,
        base_event: Callable[[], HistoryEvent],
        *,
        on_segment_closed: Callable[[Path], None] | None = None,
        is_archived: Callable[[Path], bool] | None = None,
        statvfs: Callable[[Path], os.statvfs_result] = os.statvfs,
        interval_s: float = PASS_INTERVAL_S,
    ) -> None:
        self.writer = writer
        self.data_dir = data_dir
        self.policy = policy
        self.base_event = base_event  # the node's identity, term and configurations, for the history's own events
        self.on_segment_closed = on_segment_closed
        self.is_archived = is_archived
        self.statvfs = statvfs
        self.interval_s = interval_s
        self.status = HistoryStatus()
        self._counters = _Counters()
        self._known: dict[int, tuple[str, int, int]] = {}  # first seq -> (name, device, inode) as last seen
        self._verified: set[str] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def directory(self) -> Path:
        return self.writer.directory

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def segment_closed(self, _path: Path) -> None:
        """The writer's `on_rotate`: compress it soon rather than at the next regular pass."""
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception:  # a bug here must not stop the node, nor the next pass
                log.exception("history maintenance failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval_s)
            self._wake.clear()

    async def run_once(self) -> None:
        for path in leftover_files(self.directory):
            log.info("history: removing %s, left by an interrupted compression", path.name)
            path.unlink(missing_ok=True)
        self._keep_reserve()
        await self._compress_closed()
        await self._verify_compressed()
        self._notice_lost_segments()
        volume = volume_usage(self.data_dir, self.statvfs)
        cut = self._plan(volume)
        if cut is not None:
            self._cut(cut)
            volume = volume_usage(self.data_dir, self.statvfs)
        self._update_status(volume)

    # -- the passes ----------------------------------------------------------------------------------------

    def _closed(self) -> list[Segment]:
        open_segment = self.writer.open_segment
        return [s for s in list_segments(self.directory) if open_segment is None or s.path != open_segment.path]

    async def _compress_closed(self) -> None:
        loop = asyncio.get_running_loop()
        for segment in self._closed():
            if segment.compressed:
                continue
            try:
                target = await loop.run_in_executor(None, compress, segment.path)
            except OSError as error:  # a full disk, say: the plain segment stays and is tried again
                log.warning("history: cannot compress %s: %s", segment.path.name, error.strerror or error)
                continue
            self._forget(segment.first_seq)  # replaced by its compressed file, not lost
            if self.on_segment_closed is not None:
                self.on_segment_closed(target)

    async def _verify_compressed(self) -> None:
        loop = asyncio.get_running_loop()
        for segment in self._closed():
            if not segment.compressed or segment.path.name in self._verified:
                continue
            problem = await loop.run_in_executor(None, verify_compressed, segment.path)
            self._verified.add(segment.path.name)
            if problem:
                log.warning("history: %s", problem)
                self._counters.damaged[segment.path.name] = problem

    def _notice_lost_segments(self) -> None:
        base = self.base_event()
        self.writer.check_open_segment(base)
        seen: dict[int, tuple[str, int, int]] = {}
        for segment in self._closed():  # the open segment is the writer's to watch
            with contextlib.suppress(FileNotFoundError):
                stat = segment.path.stat()
                seen[segment.first_seq] = (segment.path.name, stat.st_dev, stat.st_ino)
        open_segment = self.writer.open_segment
        bounds = sorted(set(self._known) | set(seen) | ({open_segment.first_seq} if open_segment else set()))
        for index, first in enumerate(bounds):
            known = self._known.get(first)
            if known is None:
                continue
            now = seen.get(first)
            if now is not None and now == known:
                continue
            last = (bounds[index + 1] - 1) if index + 1 < len(bounds) else self.writer.last_seq
            what = "deleted" if now is None else "replaced by another file"
            self.writer.record_loss(base, first, last, f"{known[0]} was {what} while the node was running")
        self._known = seen

    def _forget(self, first_seq: int) -> None:
        self._known.pop(first_seq, None)

    def _plan(self, volume: VolumeUsage | None) -> Cut | None:
        closed: list[ClosedSegment] = []
        for segment in self._closed():
            with contextlib.suppress(FileNotFoundError):
                stat = segment.path.stat()
                closed.append(ClosedSegment(segment.first_seq, segment.path, stat.st_size, stat.st_mtime))
        open_segment = self.writer.open_segment
        open_size = 0
        if open_segment is not None:
            with contextlib.suppress(FileNotFoundError):
                open_size = open_segment.path.stat().st_size
        next_first = open_segment.first_seq if open_segment is not None else self.writer.last_seq + 1
        return plan_cut(closed, open_size, next_first, time.time(), self.policy, volume, self.is_archived)

    def _keep_reserve(self) -> None:
        reserve = self.directory / RESERVE_FILE
        if reserve.exists():
            return
        try:
            with reserve.open("wb") as file:
                file.write(bytes(RESERVE_BYTES))
                file.flush()
                os.fsync(file.fileno())
        except OSError:
            reserve.unlink(missing_ok=True)  # no room yet: the next pass tries again

    def _cut(self, cut: Cut) -> None:
        """The event first, durable; then the segments, oldest first (see the module's docstring)."""
        if cut.unarchived or self.writer.write_failure:
            # The volume is (nearly) full: make room for the event that must come first.
            (self.directory / RESERVE_FILE).unlink(missing_ok=True)
        event = self.writer.marks_event(
            self.base_event(), EventType.RETENTION_CUT, first_kept_seq=cut.first_kept_seq, reason=cut.reason
        )
        self.writer.append(event)
        self.writer.sync()
        if self.writer.write_failure:
            log.error("history: not deleting segments: the retention_cut event could not be written")
            return
        for segment in cut.delete:
            self._forget(segment.first_seq)
            segment.path.unlink(missing_ok=True)
        fsync_dir(self.directory)
        self._keep_reserve()
        counters = self._counters
        counters.cuts += 1
        counters.deleted_bytes += cut.deleted_bytes
        counters.unarchived_deleted += cut.unarchived
        counters.first_kept_seq = cut.first_kept_seq
        for segment in cut.delete:
            counters.damaged.pop(segment.path.name, None)
        level = logging.WARNING if cut.unarchived else logging.INFO
        log.log(
            level, "history: deleted %d segments before seq %d (%s)", len(cut.delete), cut.first_kept_seq, cut.reason
        )

    def _update_status(self, volume: VolumeUsage | None) -> None:
        segments = list_segments(self.directory)
        size = 0
        for segment in segments:
            with contextlib.suppress(FileNotFoundError):
                size += segment.path.stat().st_size
        counters = self._counters
        self.status = HistoryStatus(
            history_bytes=size,
            segments=len(segments),
            volume=volume,
            disk_problem=self._disk_problem(volume),
            history_problem=history_problem(self.writer.losses, self.writer.write_failure, counters.damaged),
            cuts=counters.cuts,
            deleted_bytes=counters.deleted_bytes,
            unarchived_deleted=counters.unarchived_deleted,
            lost_events=sum(loss.events for loss in self.writer.losses),
            damaged_segments=len(counters.damaged),
            first_kept_seq=counters.first_kept_seq,
        )

    def _disk_problem(self, volume: VolumeUsage | None) -> str:
        if volume is None or volume.used_share < self.policy.high_watermark:
            return ""
        flood = volume.used_share >= self.policy.flood_stage
        return f"the data volume is {volume.used_share:.0%} full ({volume.available // (1 << 20)} MiB free), past " + (
            f"history.disk.watermark.flood_stage ({self.policy.flood_stage:.0%}): the history is deleted down "
            "to the high watermark even where the archive does not have it yet"
            if flood
            else f"history.disk.watermark.high ({self.policy.high_watermark:.0%})"
        )


def history_problem(losses: list[HistoryLoss], write_failure: str, damaged: dict[str, str]) -> str:
    """What is wrong with the history, in one line for health ('' when nothing is)."""
    parts = []
    if write_failure:
        parts.append(write_failure)
    if losses:
        events = sum(loss.events for loss in losses)
        parts.append(f"{events} events lost while the node ran (last: {losses[-1].reason})")
    if damaged:
        name, problem = next(iter(damaged.items()))
        more = f" and {len(damaged) - 1} more" if len(damaged) > 1 else ""
        parts.append(f"damaged segment {name}{more}: {problem}")
    return "; ".join(parts)
