"""`transport.secret_file`: the cluster secret that authenticates peer messages (`auth`), checked at startup."""

from __future__ import annotations

from pathlib import Path

from coordinated.coordination.settings import Parsed, Setting


def parse_secret_file(value: str) -> str:
    # Read at startup so that a missing or empty secret stops the node instead of running unauthenticated.
    path = Path(value)
    try:
        secret = path.read_bytes().strip()
    except OSError as error:
        raise ValueError(f"cannot read [{value}]: {error.strerror or error}") from None
    if len(secret) < 16:
        raise ValueError(f"the secret in [{value}] is shorter than 16 bytes")
    return str(path)


SECRET_FILE: Setting[str | None] = Setting(
    "transport.secret_file",
    Parsed(parse_secret_file),
    None,
    "file with the cluster secret (at least 16 bytes); enables transport authentication",
)
