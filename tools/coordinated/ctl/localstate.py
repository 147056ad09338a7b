"""Where `coordinated local up` keeps its cluster (data, logs and `cluster.json`, which names the nodes'
PIDs and endpoints), so that `local down` and the other commands find it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import msgspec

DIR_ENV = "COORDINATED_LOCAL_DIR"


class LocalNodeRecord(msgspec.Struct, frozen=True):
    name: str
    pid: int
    url: str
    data_dir: str


class LocalClusterRecord(msgspec.Struct, frozen=True):
    nodes: list[LocalNodeRecord]

    @property
    def endpoints(self) -> list[str]:
        return [node.url for node in self.nodes]


def local_dir(given: str | None = None) -> Path:
    """`--dir`, else `$COORDINATED_LOCAL_DIR`, else `$XDG_STATE_HOME/coordinated/local` (~/.local/state)."""
    if given:
        return Path(given)
    if os.environ.get(DIR_ENV):
        return Path(os.environ[DIR_ENV])
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "coordinated" / "local"


def record_path(directory: Path) -> Path:
    return directory / "cluster.json"


def read_record(directory: Path) -> LocalClusterRecord | None:
    """The running local cluster's record, or None if there is none (or it cannot be read)."""
    try:
        return msgspec.json.decode(record_path(directory).read_bytes(), type=LocalClusterRecord)
    except (OSError, msgspec.DecodeError):
        return None


def write_record(directory: Path, record: LocalClusterRecord) -> None:
    path = record_path(directory)
    temporary = path.with_suffix(".tmp")
    temporary.write_bytes(msgspec.json.format(msgspec.json.encode(record)))
    temporary.replace(path)


def as_json(record: LocalClusterRecord) -> Any:
    return json.loads(msgspec.json.encode(record))
