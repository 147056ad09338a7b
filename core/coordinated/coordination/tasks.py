"""What a master task asks of the next cluster state. `batch.execute_batch` applies a batch of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coordinated.coordination.client import ClientRequest
from coordinated.coordination.state import DiscoveryNode


@dataclass(frozen=True)
class ElectedAsMaster:
    """The first task of a new master: name itself master and add itself to the nodes."""


@dataclass(frozen=True)
class NodeJoin:
    node: DiscoveryNode


@dataclass(frozen=True)
class NodeLeft:
    node_id: str


@dataclass(frozen=True)
class Reconfigure:
    """Move to a better voting configuration, if there is one (every batch tries; this forces a batch)."""


@dataclass(frozen=True)
class RefreshNodeVersions:
    """The master learned a node's version: publish `node_versions` anew if it changes (every batch sets it)."""


@dataclass(frozen=True)
class ExpireSessions:
    """End these TTL sessions if they are still expired when the batch runs (a keepalive may come first)."""

    session_ids: tuple[str, ...]


@dataclass(frozen=True)
class CheckpointSessions:
    """Record these TTL sessions' remaining TTL (or their whole TTL, if a keepalive just came) in the state."""

    session_ids: tuple[str, ...]


@dataclass(frozen=True)
class ClientTask:
    request: ClientRequest[Any]


TaskPayload = (
    ElectedAsMaster
    | NodeJoin
    | NodeLeft
    | Reconfigure
    | RefreshNodeVersions
    | ExpireSessions
    | CheckpointSessions
    | ClientTask
)
