"""The settings of S3 clients, with Elasticsearch's repository-s3 names.

`s3.client.NAME.*` describe how to reach one S3-compatible service; the sidecar's history archive
(`history.archive.s3.client`) and each `s3` snapshot repository (its `client` setting) name the client they use.
Credentials are never settings: they come from the standard AWS sources (the environment, a web-identity token,
the file that `s3.client.NAME.credentials_file` names). A credential given as a setting stops the node with a
message that says where it goes instead, and never echoes its value.
"""

from __future__ import annotations

import configparser
import re
from dataclasses import dataclass
from enum import StrEnum

from coordinated.coordination.settings import (
    AFFIX,
    Parsed,
    Setting,
    Settings,
    bool_setting,
    enum_setting,
    int_setting,
    time_setting,
)

CLIENT_PREFIX = "s3.client."
DEFAULT_CLIENT = "default"
CREDENTIALS_PROFILE = "default"  # the profile of the credentials file that is read
# The keys of a credentials file, as the AWS CLI and SDKs write them.
ACCESS_KEY, SECRET_KEY, SESSION_TOKEN = "aws_access_key_id", "aws_secret_access_key", "aws_session_token"


class Protocol(StrEnum):
    HTTPS = "https"
    HTTP = "http"


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


def parse_region(value: str) -> str:
    if not _REGION.fullmatch(value):
        raise ValueError(f"[{value}] is not a region name such as us-east-1")
    return value


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


_CLIENT = f"{CLIENT_PREFIX}{AFFIX}."
_REFUSED = "refused: credentials never go in settings (see `credentials_file`)"

S3_ENDPOINT = Setting(
    f"{_CLIENT}endpoint",
    Parsed(parse_endpoint),
    "",
    "`host[:port]` (with `protocol`) or an `http(s)://` URL of an S3-compatible service; none: AWS's endpoint "
    "for the region",
)
S3_PROTOCOL = enum_setting(
    f"{_CLIENT}protocol", Protocol.HTTPS, doc="`https` or `http`, for an endpoint given as `host[:port]`"
)
S3_REGION = Setting(f"{_CLIENT}region", Parsed(parse_region), "us-east-1", "the region requests are signed for")
S3_PATH_STYLE_ACCESS = bool_setting(
    f"{_CLIENT}path_style_access",
    False,
    doc="`true` addresses buckets as `endpoint/bucket/key` (most S3-compatible services), `false` as "
    "`bucket.endpoint/key`",
)
S3_CREDENTIALS_FILE: Setting[str | None] = Setting(
    f"{_CLIENT}credentials_file",
    Parsed(parse_credentials_file),
    None,
    "an AWS credentials file whose `[default]` profile holds the keys (re-read every 20 minutes); none: the "
    "environment (`AWS_ACCESS_KEY_ID`...), a web-identity token (`AWS_WEB_IDENTITY_TOKEN_FILE`, `AWS_ROLE_ARN`) "
    "or the instance's role",
)
S3_READ_TIMEOUT = time_setting(
    f"{_CLIENT}read_timeout",
    "50s",
    minimum="100ms",
    maximum="1h",
    doc="how long to wait for an answer before the request is retried",
)
S3_CALL_TIMEOUT = time_setting(
    f"{_CLIENT}call_timeout",
    "30s",
    minimum="1s",
    maximum="1h",
    doc="the deadline of one S3 request with all its retries, plus a second for each MiB it sends or receives; "
    "past it the request fails (a store that hangs, one stopped with SIGSTOP, answers nothing and never resets "
    "the connection)",
)
S3_MAX_RETRIES = int_setting(
    f"{_CLIENT}max_retries", 3, minimum=0, maximum=20, doc="retries of a failed request, with exponential backoff"
)
# Elasticsearch keeps these in its keystore; here they are refused with where credentials go instead.
S3_ACCESS_KEY = Setting(f"{_CLIENT}access_key", Parsed(_refuse_credential), None, _REFUSED)
S3_SECRET_KEY = Setting(f"{_CLIENT}secret_key", Parsed(_refuse_credential), None, _REFUSED)
S3_SESSION_TOKEN = Setting(f"{_CLIENT}session_token", Parsed(_refuse_credential), None, _REFUSED)

S3_CLIENT_SETTINGS = (
    S3_ENDPOINT,
    S3_PROTOCOL,
    S3_REGION,
    S3_PATH_STYLE_ACCESS,
    S3_CREDENTIALS_FILE,
    S3_READ_TIMEOUT,
    S3_CALL_TIMEOUT,
    S3_MAX_RETRIES,
    S3_ACCESS_KEY,
    S3_SECRET_KEY,
    S3_SESSION_TOKEN,
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
    call_timeout_s: float = 30.0  # the deadline of one request with its retries (`call_timeout`, `ObjectStore.call`)

    @classmethod
    def from_settings(cls, settings: Settings, name: str) -> S3ClientSettings:
        endpoint = settings.for_namespace(S3_ENDPOINT, name)
        if endpoint and "://" not in endpoint:
            endpoint = f"{settings.for_namespace(S3_PROTOCOL, name).value}://{endpoint}"
        return cls(
            name=name,
            endpoint_url=endpoint or None,
            region=settings.for_namespace(S3_REGION, name),
            path_style_access=settings.for_namespace(S3_PATH_STYLE_ACCESS, name),
            credentials_file=settings.for_namespace(S3_CREDENTIALS_FILE, name),
            read_timeout_s=settings.for_namespace(S3_READ_TIMEOUT, name) / 1000,
            max_retries=settings.for_namespace(S3_MAX_RETRIES, name),
            call_timeout_s=settings.for_namespace(S3_CALL_TIMEOUT, name) / 1000,
        )


def client_names(settings: Settings) -> set[str]:
    """The clients that some setting describes."""
    return settings.namespaces(*S3_CLIENT_SETTINGS)
