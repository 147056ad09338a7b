"""`path.repo` and `snapshot.secret_file`: where `fs` snapshot repositories may live, and the secret that signs
snapshots (`snapshots`)."""

from __future__ import annotations

from coordinated.coordination.settings import Parsed, Setting
from coordinated.sidecar.peers.auth_settings import parse_secret_file


def parse_repo_paths(value: str) -> tuple[str, ...]:
    """`path.repo`: a comma list of absolute directories that snapshot repositories may live under."""
    paths = tuple(part.strip() for part in value.split(",") if part.strip())
    for path in paths:
        if not path.startswith("/"):
            raise ValueError(f"[{path}] is not an absolute path")
    return paths


PATH_REPO: Setting[tuple[str, ...] | None] = Setting(
    "path.repo",
    Parsed(parse_repo_paths),
    None,
    "comma list of absolute directories that `fs` snapshot repositories may live under (none: snapshots are off)",
)
SNAPSHOT_SECRET_FILE: Setting[str | None] = Setting(
    "snapshot.secret_file",
    Parsed(parse_secret_file),
    None,
    "file with the snapshot secret (at least 16 bytes): snapshots are written signed (HMAC-SHA256) and only "
    "snapshots signed with it are read",
)
