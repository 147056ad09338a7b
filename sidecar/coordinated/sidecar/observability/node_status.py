"""`NodeStatus`: a frozen snapshot of one node, what its client API and health read of it (`Node.status()`),
as the core's `CoordinatorStatus` is what the shells read of the core."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from coordinated.coordination.settings import Settings
from coordinated.coordination.state import ClusterState
from coordinated.coordination.status import CoordinatorStatus
from coordinated.sidecar.events.history_maintenance import HistoryStatus


@dataclass(frozen=True, slots=True)
class NodeStatus:
    node_id: str
    node_name: str
    transport_address: str
    settings: Settings  # the node's own, as it started (the applied state's are in `applied_state`)
    history_dir: Path
    applied_state: ClusterState  # committed, and immutable
    core: CoordinatorStatus | None  # None until the core has started
    unresolved_seeds: tuple[str, ...]  # seed hosts the last probe could not resolve, each with why
    persistence_failure: str | None  # why the last write or sync of the store failed; None once one succeeds
    history: HistoryStatus  # the history and the data volume as the last maintenance pass saw them
