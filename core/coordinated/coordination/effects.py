"""What the core asks its shell to do. The shell must carry effects out in the order they are returned:
a history event comes before the message or apply that it records.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinated.coordination.client import ClientResult
from coordinated.coordination.history import HistoryEvent
from coordinated.coordination.messages import Message
from coordinated.coordination.state import ClusterState


@dataclass(frozen=True, slots=True)
class Send:
    """Send a message. A Send to the node's own address is handed back to it (`handle_message`) once the
    sends before it are under way: the master writes its copy of a state while the followers write theirs."""

    destination: str  # a transport address
    message: Message


@dataclass(frozen=True, slots=True)
class ProbeSeeds:
    """Resolve `discovery.seed_hosts` (a DNS name may stand for many addresses), then call
    `Coordinator.handle_seed_addresses` with the result."""


@dataclass(frozen=True, slots=True)
class RecordHistory:
    """One history event without its `seq` and `ts`, which the shell assigns."""

    event: HistoryEvent


@dataclass(frozen=True, slots=True)
class StateApplied:
    """A state became visible on this node (also a no-master view, with `master_node` None)."""

    state: ClusterState


@dataclass(frozen=True, slots=True)
class RequestCompleted:
    request_id: int
    result: ClientResult


@dataclass(frozen=True, slots=True)
class PublicationFinished:
    """On the master: a publication ended, committed or not (for latency metrics)."""

    version: int
    committed: bool
    commit_latency_ms: int | None
    total_latency_ms: int


@dataclass(frozen=True, slots=True)
class Log:
    level: str  # debug, info, warning
    message: str


Effect = Send | ProbeSeeds | RecordHistory | StateApplied | RequestCompleted | PublicationFinished | Log
