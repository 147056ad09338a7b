"""Object storage names, shared by the S3 client settings, the `s3` snapshot repository and the operator's
`spec.archive`: S3's bucket naming rules, key prefixes in S3's "safe characters" (no escaping anywhere: URLs,
Hadoop paths, shells), and S3 client names."""

from __future__ import annotations

import re

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_BASE_PATH = re.compile(r"[A-Za-z0-9!_.*'()/-]*")
_CLIENT_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def parse_bucket(value: str) -> str:
    if not _BUCKET.fullmatch(value) or ".." in value:
        raise ValueError(f"[{value}] is not a valid bucket name: 3 to 63 lowercase letters, digits, '.' or '-'")
    return value


def parse_base_path(value: str) -> str:
    """A key prefix without leading or trailing slashes ("" for the bucket's root)."""
    path = value.strip("/")
    if not _BASE_PATH.fullmatch(path) or (path and any(part in ("", ".", "..") for part in path.split("/"))):
        raise ValueError(
            f"[{value}] is not a valid base path: letters, digits and !_.*'()- in segments separated by '/', "
            "none empty, '.' or '..'"
        )
    return path


def parse_client_name(value: str) -> str:
    if not _CLIENT_NAME.fullmatch(value):
        raise ValueError(f"[{value}] is not a valid client name: 1 to 64 letters, digits, '_' or '-'")
    return value
