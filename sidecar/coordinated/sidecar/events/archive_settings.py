"""`history.archive.*`: whether closed history segments go to object storage, where, and through which
`s3.client.NAME` (`archive`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from coordinated.coordination.object_names import parse_base_path, parse_bucket, parse_client_name
from coordinated.coordination.settings import EnumChoice, Parsed, Setting, Settings, SettingsRule
from coordinated.s3.s3_settings import DEFAULT_CLIENT, S3ClientSettings


class ArchiveType(StrEnum):
    S3 = "s3"


ARCHIVE_TYPE: Setting[ArchiveType | None] = Setting(
    "history.archive.type",
    EnumChoice(ArchiveType),
    None,
    "`s3` uploads every closed history segment to object storage; unset: no archive",
)
ARCHIVE_BUCKET: Setting[str | None] = Setting(
    "history.archive.s3.bucket",
    Parsed(parse_bucket),
    None,
    "the archive's bucket (required with `history.archive.type: s3`)",
)
ARCHIVE_BASE_PATH = Setting(
    "history.archive.s3.base_path",
    Parsed(parse_base_path),
    "",
    "key prefix in the bucket; objects go under `BASE_PATH/CLUSTER_UUID/NODE_ID/segment-N...`",
)
ARCHIVE_CLIENT = Setting(
    "history.archive.s3.client", Parsed(parse_client_name), DEFAULT_CLIENT, "the `s3.client.NAME` the archive uses"
)
ARCHIVE_SETTINGS = (ARCHIVE_TYPE, ARCHIVE_BUCKET, ARCHIVE_BASE_PATH, ARCHIVE_CLIENT)


def _archive_problem(settings: Settings) -> str | None:
    """An archive needs its bucket; a bucket without `history.archive.type` is a mistake."""
    archive_type, bucket = settings[ARCHIVE_TYPE], settings[ARCHIVE_BUCKET]
    if archive_type is ArchiveType.S3 and bucket is None:
        return "setting [history.archive.s3.bucket] is required when [history.archive.type] is [s3]"
    if archive_type is None and bucket is not None:
        return "setting [history.archive.s3.bucket] is set but [history.archive.type] is not; set it to [s3]"
    return None


ARCHIVE_RULE = SettingsRule(
    "`history.archive.s3.bucket` is required when `history.archive.type` is `s3`, and only then",
    _archive_problem,
)


@dataclass(frozen=True)
class ArchiveSettings:
    """Where closed history segments go: `s3://bucket/base_path/CLUSTER_UUID/NODE_ID/segment-...`."""

    bucket: str
    base_path: str
    client: S3ClientSettings

    @classmethod
    def from_settings(cls, settings: Settings) -> ArchiveSettings | None:
        bucket = settings[ARCHIVE_BUCKET]
        if settings[ARCHIVE_TYPE] is None or bucket is None:  # ARCHIVE_RULE: both or neither
            return None
        return cls(
            bucket=bucket,
            base_path=settings[ARCHIVE_BASE_PATH],
            client=S3ClientSettings.from_settings(settings, settings[ARCHIVE_CLIENT]),
        )
