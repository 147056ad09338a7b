"""The values the client returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: Any
    version: int  # the state version of the write that last changed the key
    create_version: int  # the state version of the write that created it (a lock's fencing token)
    session: str | None = None  # the session an ephemeral key belongs to


@dataclass(frozen=True)
class WriteResult:
    key: str
    term: int
    version: int  # the key's new version (for a create, also its create_version)


@dataclass(frozen=True)
class TxnResult:
    succeeded: bool
    version: int
    results: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class WatchEvent:
    """A change under a watched prefix. `reset` says the watch fell behind the node's change log: forget what
    you know under the prefix; the `put` events that follow (at the version of that re-read) are its keys."""

    type: Literal["put", "delete", "reset"]
    key: str
    value: Any
    version: int


@dataclass(frozen=True)
class WatchBatch:
    version: int  # every change up to this version has been reported; watch on from here
    events: list[WatchEvent]


@dataclass(frozen=True)
class SessionInfo:
    id: str
    ttl: str | None = None
    body: dict[str, Any] = field(default_factory=dict)
