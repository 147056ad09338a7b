"""The history's settings: segments, retention and the data volume's watermarks (docs/sidecar.md, "History").

Defaults fit the operator's default 1 GiB data volume with room to spare: the history keeps at most 256 MB
(a quarter of it), the state store and its write-ahead log have the rest, and the watermarks act long before
the volume is full.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coordinated.coordination.settings import Setting, SettingsError, parse_bool, parse_byte_size, parse_time_ms

MIN_SEGMENT_SIZE = 4 * 1024
MIN_RETENTION_SIZE = 4 * MIN_SEGMENT_SIZE


def parse_segment_size(value: str) -> int:
    parsed = parse_byte_size(value)
    if parsed < MIN_SEGMENT_SIZE:
        raise ValueError(f"must be at least [4kb], got [{value}]")
    return parsed


def parse_retention_size(value: str) -> int:
    parsed = parse_byte_size(value)
    if parsed < MIN_RETENTION_SIZE:
        raise ValueError(f"must be at least [16kb], got [{value}]")
    return parsed


def parse_max_age(value: str) -> int:
    """A time, or `0` for no age limit (then only the size limit deletes segments)."""
    if value.strip() == "0":
        return 0
    parsed = parse_time_ms(value)
    if parsed <= 0:
        raise ValueError(f"must be positive, or 0 for no limit, got [{value}]")
    return parsed


def parse_watermark(value: str) -> float:
    """A share of the data volume: `85%` or `0.85`."""
    text = value.strip()
    try:
        share = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise ValueError(f"expected a percentage such as 85% (or a ratio such as 0.85), got [{value}]") from None
    if not 0.0 < share < 1.0:
        raise ValueError(f"must be above 0% and below 100%, got [{value}]")
    return share


HISTORY_SETTINGS = (
    Setting("history.segment_size", parse_segment_size, "16mb"),
    Setting("history.fsync", parse_bool, "false"),
    Setting("history.retention.max_size", parse_retention_size, "256mb"),
    Setting("history.retention.max_age", parse_max_age, "7d"),
    Setting("history.disk.watermark.high", parse_watermark, "85%"),
    Setting("history.disk.watermark.flood_stage", parse_watermark, "95%"),
)


def check_history_settings(parsed: Mapping[str, Any]) -> None:
    high, flood = parsed.get("history.disk.watermark.high"), parsed.get("history.disk.watermark.flood_stage")
    if high is not None and flood is not None and high >= flood:
        raise SettingsError(
            f"setting [history.disk.watermark.high] ({high:.0%}) must be below "
            f"[history.disk.watermark.flood_stage] ({flood:.0%})"
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
    def from_settings(cls, parsed: Mapping[str, Any]) -> RetentionPolicy:
        max_size = int(parsed["history.retention.max_size"])
        return cls(
            max_size=max_size,
            max_age_s=int(parsed["history.retention.max_age"]) / 1000,
            high_watermark=float(parsed["history.disk.watermark.high"]),
            flood_stage=float(parsed["history.disk.watermark.flood_stage"]),
            segment_size=min(int(parsed["history.segment_size"]), max_size // 4),
        )
