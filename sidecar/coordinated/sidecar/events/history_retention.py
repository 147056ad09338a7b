"""Which closed history segments to delete: a pure decision over the segments, the clock and the volume.

Segments go oldest first and only as a prefix, so the history kept is always one run of seqs and the
`retention_cut` event's `first_kept_seq` says exactly where it starts. The open segment is never deleted.

- Past `history.retention.max_size` (all segments, the open one included) or `history.retention.max_age`
  (by the time a segment was last written), the oldest closed segments go.
- With an archive (`is_archived` given), a segment goes only once the archive has it: the first segment the
  archive lacks stops the cut, and the history may then grow past its limits while the archive is away.
- Past `history.disk.watermark.flood_stage` of the data volume, the history gives way whatever the archive
  says: the oldest closed segments go until the volume is back under `history.disk.watermark.high`, or no
  closed segment is left. The history is what the node can give up; the state store is not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from coordinated.sidecar.events.history_settings import RetentionPolicy


@dataclass(frozen=True)
class ClosedSegment:
    first_seq: int
    path: Path
    size: int
    mtime: float  # when it was last written (seconds)


@dataclass(frozen=True)
class VolumeUsage:
    """The data volume, as `statvfs` sees it, and how full it is the way `df` counts it.

    `free` counts the blocks the filesystem keeps for root (ext4 keeps 5% by default, some hosts far more);
    `available` leaves them out, because the node cannot count on them. The share in use is `df`'s "Use%":
    used / (used + available). Dividing by the whole size instead would call a volume with many reserved blocks
    full long before it is (a 252 GB disk with 55 GB used and 37 GB available is 60% full, not 85%).
    """

    total: int
    available: int
    free: int | None = None  # free blocks including the reserved ones; None: no reserved blocks

    @property
    def used(self) -> int:
        return self.total - (self.available if self.free is None else self.free)

    @property
    def usable(self) -> int:
        """What the node can fill: what is used plus what is available."""
        return self.used + self.available

    @property
    def used_share(self) -> float:
        return self.used / self.usable if self.usable > 0 else 0.0


@dataclass(frozen=True)
class Cut:
    delete: tuple[ClosedSegment, ...]
    first_kept_seq: int
    reason: str
    unarchived: int = 0  # segments deleted before the archive had them (the flood stage)

    @property
    def deleted_bytes(self) -> int:
        return sum(segment.size for segment in self.delete)


def plan_cut(
    closed: Sequence[ClosedSegment],
    open_size: int,
    next_first_seq: int,
    now: float,
    policy: RetentionPolicy,
    volume: VolumeUsage | None,
    is_archived: Callable[[Path], bool] | None = None,
) -> Cut | None:
    """The cut to make now, or None. `closed` is oldest first; `next_first_seq` is where the history goes on
    after them (the open segment's first seq)."""
    total = open_size + sum(segment.size for segment in closed)
    count = 0
    reasons: list[str] = []
    for segment in closed:
        over_size = total > policy.max_size
        too_old = policy.max_age_s > 0 and now - segment.mtime > policy.max_age_s
        if not (over_size or too_old):
            break
        if is_archived is not None and not is_archived(segment.path):
            break
        reason = "history.retention.max_size" if over_size else "history.retention.max_age"
        if reason not in reasons:
            reasons.append(reason)
        total -= segment.size
        count += 1
    unarchived = 0
    if volume is not None and volume.usable > 0 and volume.used_share >= policy.flood_stage:
        must_free = volume.used - int(policy.high_watermark * volume.usable)
        freed = sum(segment.size for segment in closed[:count])
        before = count
        while count < len(closed) and freed < must_free:
            if is_archived is not None and not is_archived(closed[count].path):
                unarchived += 1
            freed += closed[count].size
            count += 1
        if count > before:
            reasons.append(
                f"the data volume is {volume.used_share:.0%} full, past history.disk.watermark.flood_stage "
                f"({policy.flood_stage:.0%})" + (f"; {unarchived} segments were not archived yet" if unarchived else "")
            )
    if count == 0:
        return None
    deleted = tuple(closed[:count])
    first_kept = closed[count].first_seq if count < len(closed) else next_first_seq
    return Cut(deleted, first_kept, "; ".join(reasons), unarchived)
