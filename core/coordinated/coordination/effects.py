"""What the core asks its shell to do. The shell must carry effects out in the order they are returned:
a history event comes before the message or apply that it records.

Effects are msgspec structs rather than frozen dataclasses: a few are made for every write, and a struct is
built about four times faster.
"""

from __future__ import annotations

import msgspec

from coordinated.coordination.client import ClientResult
from coordinated.coordination.history import HistoryEvent
from coordinated.coordination.messages import Message
from coordinated.coordination.state import ClusterState


class Send(msgspec.Struct, frozen=True):
    """Send a message. A Send to the node's own address is handed back to it (`handle_message`) once the
    sends before it are under way: the master writes its copy of a state while the followers write theirs."""

    destination: str  # a transport address
    message: Message


class ProbeSeeds(msgspec.Struct, frozen=True):
    """Resolve `discovery.seed_hosts` (a DNS name may stand for many addresses), then call
    `Coordinator.handle_seed_addresses` with the result."""


class RecordHistory(msgspec.Struct, frozen=True):
    """One history event without its `seq` and `ts`, which the shell assigns."""

    event: HistoryEvent


class StateApplied(msgspec.Struct, frozen=True):
    """A state became visible on this node (also a no-master view, with `master_node` None)."""

    state: ClusterState


class RequestCompleted(msgspec.Struct, frozen=True):
    request_id: int
    result: ClientResult


class PublicationFinished(msgspec.Struct, frozen=True):
    """On the master: a publication ended, committed or not (for latency metrics)."""

    version: int
    committed: bool
    commit_latency_ms: int | None
    total_latency_ms: int


class WatchPeers(msgspec.Struct, frozen=True):
    """Hold a watch connection to exactly these transport addresses, replacing the previous set, and report a
    closed one at once with `handle_peer_disconnected` (then connect again while it stays in the set). Sent
    when the set changes."""

    addresses: frozenset[str]


class Log(msgspec.Struct, frozen=True):
    level: str  # debug, info, warning
    message: str


Effect = Send | ProbeSeeds | RecordHistory | StateApplied | RequestCompleted | PublicationFinished | WatchPeers | Log
