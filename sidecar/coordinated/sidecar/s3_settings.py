"""The settings of S3 clients and of the history archive, with Elasticsearch's repository-s3 names.

`s3.client.NAME.*` describe how to reach one S3-compatible service; the history archive
(`history.archive.s3.client`) and each `s3` snapshot repository (its `client` setting) name the client they use.
Credentials are never settings: they come from the standard AWS sources (the environment, a web-identity token,
the file that `s3.client.NAME.credentials_file` names). A credential given as a setting stops the node with a
message that says where it goes instead, and never echoes its value.
"""

from __future__ import annotations

import configparser
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coordinated.coordination.settings import (
    Setting,
    SettingsError,
    parse_base_path,
    parse_bool,
    parse_bucket,
    parse_client_name,
    parse_time_ms,
)

CLIENT_PREFIX = "s3.client."
DEFAULT_CLIENT = "default"
PROTOCOLS = ("https", "http")
ARCHIVE_TYPES = ("s3",)
CREDENTIALS_PROFILE = "default"  # the profile of the credentials file that is read
# The keys of a credentials file, as the AWS CLI and SDKs write them.
ACCESS_KEY, SECRET_KEY, SESSION_TOKEN = "aws_access_key_id", "aws_secret_access_key", "aws_session_token"

_REGION = re.compile(r"[a-z0-9-]{1,32}")


def parse_endpoint(value: str) -> str:
    """`host[:port]` (with `protocol`) or a whole URL; "" means AWS's endpoint for the region."""
    endpoint = value.strip()
    if "://" in endpoint and not endpoint.startswith(("http://", "https://")):
        raise ValueError(f"[{value}] is not an http:// or https:// URL")
    host = endpoint.split("://", 1)[-1]
    if endpoint and (not host or "/" in host.rstrip("/") or " " in host):
        raise ValueError(f"[{value}] is not host[:port] or an http(s) URL without a path")
    return endpoint.rstrip("/")


def parse_protocol(value: str) -> str:
    if value not in PROTOCOLS:
        raise ValueError(f"expected one of {list(PROTOCOLS)}, got [{value}]")
    return value


def parse_region(value: str) -> str:
    if not _REGION.fullmatch(value):
        raise ValueError(f"[{value}] is not a region name such as us-east-1")
    return value


def parse_archive_type(value: str) -> str:
    if value not in ARCHIVE_TYPES:
        raise ValueError(f"expected one of {list(ARCHIVE_TYPES)} (or leave it unset for no archive), got [{value}]")
    return value


def _positive_time(value: str) -> int:
    parsed = parse_time_ms(value)
    if parsed <= 0:
        raise ValueError(f"must be positive, got [{value}]")
    return parsed


def _retries(value: str) -> int:
    try:
        parsed = int(value)
    except ValueError:
        raise ValueError(f"expected an integer, got [{value}]") from None
    if not 0 <= parsed <= 20:
        raise ValueError(f"must be between 0 and 20, got [{value}]")
    return parsed


def read_credentials_file(path: str) -> dict[str, str]:
    """The `[default]` profile of an AWS credentials file. Raises ValueError naming the file and what is wrong,
    never a value from it."""
    parser = configparser.RawConfigParser()
    try:
        with open(path, encoding="utf-8") as file:
            parser.read_file(file)
    except OSError as error:
        raise ValueError(f"cannot read [{path}]: {error.strerror or error}") from None
    except (configparser.Error, UnicodeDecodeError):
        raise ValueError(f"[{path}] is not an AWS credentials file (INI sections and key = value lines)") from None
    if not parser.has_section(CREDENTIALS_PROFILE):
        raise ValueError(f"[{path}] has no [{CREDENTIALS_PROFILE}] profile")
    profile = dict(parser.items(CREDENTIALS_PROFILE))
    missing = [key for key in (ACCESS_KEY, SECRET_KEY) if not profile.get(key, "").strip()]
    if missing:
        raise ValueError(f"the [{CREDENTIALS_PROFILE}] profile of [{path}] lacks {', '.join(missing)}")
    return {key: value.strip() for key, value in profile.items() if key in (ACCESS_KEY, SECRET_KEY, SESSION_TOKEN)}


def parse_credentials_file(value: str) -> str:
    read_credentials_file(value)  # a missing or unusable file stops the node at startup, naming it
    return value


def _refuse_credential(value: str) -> str:
    raise ValueError(
        "credentials never go in the node's settings (they would show in its command line and configuration): "
        "put them in the file that s3.client.NAME.credentials_file names, or in the environment "
        "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, or AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN)"
    )


_CLIENT = f"{CLIENT_PREFIX}*."
S3_CLIENT_SETTINGS = (
    Setting(f"{_CLIENT}endpoint", parse_endpoint, ""),
    Setting(f"{_CLIENT}protocol", parse_protocol, "https"),
    Setting(f"{_CLIENT}region", parse_region, "us-east-1"),
    Setting(f"{_CLIENT}path_style_access", parse_bool, "false"),
    Setting(f"{_CLIENT}credentials_file", parse_credentials_file, None),
    Setting(f"{_CLIENT}read_timeout", _positive_time, "50s"),
    Setting(f"{_CLIENT}max_retries", _retries, "3"),
    # Elasticsearch keeps these in its keystore; here they are refused with where credentials go instead.
    *(Setting(f"{_CLIENT}{name}", _refuse_credential, None) for name in ("access_key", "secret_key", "session_token")),
)

ARCHIVE_SETTINGS = (
    Setting("history.archive.type", parse_archive_type, None),
    Setting("history.archive.s3.bucket", parse_bucket, None),
    Setting("history.archive.s3.base_path", parse_base_path, ""),
    Setting("history.archive.s3.client", parse_client_name, DEFAULT_CLIENT),
)


@dataclass(frozen=True)
class S3ClientSettings:
    """One `s3.client.NAME`: where the service is and how to talk to it (never the credentials themselves)."""

    name: str
    endpoint_url: str | None  # None: AWS's endpoint for the region
    region: str
    path_style_access: bool
    credentials_file: str | None
    read_timeout_s: float
    max_retries: int

    @classmethod
    def from_parsed(cls, parsed: Mapping[str, Any], name: str) -> S3ClientSettings:
        def value(key: str) -> Any:
            full = f"{CLIENT_PREFIX}{name}.{key}"
            if full in parsed:
                return parsed[full]
            setting = next(s for s in S3_CLIENT_SETTINGS if s.name == f"{_CLIENT}{key}")
            return None if setting.default is None else setting.parse(setting.default)

        endpoint: str = value("endpoint")
        if endpoint and "://" not in endpoint:
            endpoint = f"{value('protocol')}://{endpoint}"
        return cls(
            name=name,
            endpoint_url=endpoint or None,
            region=value("region"),
            path_style_access=value("path_style_access"),
            credentials_file=value("credentials_file"),
            read_timeout_s=value("read_timeout") / 1000,
            max_retries=value("max_retries"),
        )


def client_names(parsed: Mapping[str, Any]) -> set[str]:
    """The clients that some setting describes."""
    return {name[len(CLIENT_PREFIX) :].split(".", 1)[0] for name in parsed if name.startswith(CLIENT_PREFIX)}


@dataclass(frozen=True)
class ArchiveSettings:
    """Where closed history segments go: `s3://bucket/base_path/CLUSTER_UUID/NODE_ID/segment-...`."""

    bucket: str
    base_path: str
    client: S3ClientSettings

    @classmethod
    def from_parsed(cls, parsed: Mapping[str, Any]) -> ArchiveSettings | None:
        if parsed.get("history.archive.type") is None:
            return None
        client = parsed.get("history.archive.s3.client") or DEFAULT_CLIENT
        return cls(
            bucket=parsed["history.archive.s3.bucket"],
            base_path=parsed.get("history.archive.s3.base_path") or "",
            client=S3ClientSettings.from_parsed(parsed, client),
        )


def check_archive_settings(parsed: Mapping[str, Any]) -> None:
    """An archive needs its bucket; archive settings without `history.archive.type` are a mistake."""
    archive_type = parsed.get("history.archive.type")
    if archive_type == "s3" and not parsed.get("history.archive.s3.bucket"):
        raise SettingsError("setting [history.archive.s3.bucket] is required when [history.archive.type] is [s3]")
    if archive_type is None and parsed.get("history.archive.s3.bucket"):
        raise SettingsError(
            "setting [history.archive.s3.bucket] is set but [history.archive.type] is not; set it to [s3]"
        )
