"""The history's settings: segments, retention and the data volume's watermarks (docs/sidecar.md, "History").

Defaults fit the operator's default 1 GiB data volume with room to spare: the history keeps at most 256 MB
(a quarter of it), the state store and its write-ahead log have the rest, and the watermarks act long before
the volume is full.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinated.coordination.settings import (
    Setting,
    Settings,
    SettingsRule,
    Syntax,
    ValueType,
    bool_setting,
    size_setting,
    time_setting,
)

MIN_SEGMENT_SIZE = "4kb"
MIN_RETENTION_SIZE = "16kb"  # four of the smallest segments, since a segment is at most a quarter of it

HISTORY_SEGMENT_SIZE = size_setting(
    "history.segment_size",
    "16mb",
    minimum=MIN_SEGMENT_SIZE,
    maximum="1gb",
    doc="a history segment is closed (then compressed) once it would grow past this; at most a quarter of "
    "`history.retention.max_size` is used",
)
HISTORY_FSYNC = bool_setting("history.fsync", False, doc="`true` fsyncs each history line")
RETENTION_MAX_SIZE = size_setting(
    "history.retention.max_size",
    "256mb",
    minimum=MIN_RETENTION_SIZE,
    maximum="1024gb",
    doc="the most bytes the history keeps on disk (compressed segments and the open one); the oldest closed "
    "segments beyond it are deleted, once an archive has them if there is one",
)
RETENTION_MAX_AGE = time_setting(
    "history.retention.max_age",
    "7d",
    minimum="0s",
    maximum="3650d",
    doc="closed segments last written longer ago than this are deleted (`0s`: no age limit)",
)


@dataclass(frozen=True)
class VolumeShare(ValueType[float]):
    """A share of the data volume, written `85%` or `0.85`, strictly between 0 and 1."""

    def parse(self, text: str) -> float:
        stripped = text.strip()
        try:
            share = float(stripped[:-1]) / 100 if stripped.endswith("%") else float(stripped)
        except ValueError:
            raise ValueError(f"expected a percentage such as 85% (or a ratio such as 0.85), got [{text}]") from None
        if not 0.0 < share < 1.0:
            raise ValueError(f"must be above 0% and below 100%, got [{text}]")
        return share

    def bounds(self) -> str:
        return "above 0% and below 100%"

    def extremes(self) -> tuple[str, ...]:
        return ("1%", "99%")

    def syntax(self) -> Syntax:
        return Syntax(
            "expected a percentage such as 85% or a ratio such as 0.85",
            "^([0-9]{1,2}([.][0-9]+)?%|0?[.][0-9]+)$",
        )


DISK_WATERMARK_HIGH = Setting(
    "history.disk.watermark.high",
    VolumeShare(),
    "85%",
    "share of the data volume in use above which health turns yellow and names the disk (`85%` or `0.85`)",
)
DISK_WATERMARK_FLOOD_STAGE = Setting(
    "history.disk.watermark.flood_stage",
    VolumeShare(),
    "95%",
    "share of the data volume in use above which the oldest history segments are deleted down to the high "
    "watermark, even where the archive does not have them yet; recorded in the history",
)


def _watermarks_in_order(settings: Settings) -> str | None:
    high, flood = settings[DISK_WATERMARK_HIGH], settings[DISK_WATERMARK_FLOOD_STAGE]
    if high < flood:
        return None
    return (
        f"setting [{DISK_WATERMARK_HIGH.name}] ({high:.0%}) must be below "
        f"[{DISK_WATERMARK_FLOOD_STAGE.name}] ({flood:.0%})"
    )


WATERMARKS_IN_ORDER = SettingsRule(
    "`history.disk.watermark.high` must be below `history.disk.watermark.flood_stage`", _watermarks_in_order
)


@dataclass(frozen=True)
class RetentionPolicy:
    """What the node keeps of its history, and how it guards the data volume (see `history_retention`)."""

    max_size: int
    max_age_s: float  # 0: no age limit
    high_watermark: float  # share of the volume in use above which health warns
    flood_stage: float  # ... and above which segments go even before the archive has them
    segment_size: int  # never more than a quarter of max_size, so a cut keeps the history near its limit

    @classmethod
    def from_settings(cls, settings: Settings) -> RetentionPolicy:
        max_size = settings[RETENTION_MAX_SIZE]
        return cls(
            max_size=max_size,
            max_age_s=settings[RETENTION_MAX_AGE] / 1000,
            high_watermark=settings[DISK_WATERMARK_HIGH],
            flood_stage=settings[DISK_WATERMARK_FLOOD_STAGE],
            segment_size=min(settings[HISTORY_SEGMENT_SIZE], max_size // 4),
        )
