"""One simulated node: its identity, its (flaky) storage, its settings, its running coordinator if any, and the
history it has recorded."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coordinated.coordination.coordinator import Coordinator
from coordinated.coordination.settings import Settings
from coordinated.coordination.state import DiscoveryNode
from coordinated.coordination.wire_versions import NodeVersion, newest
from coordinated.simulation.storage import FlakyPersistedState


@dataclass
class SimNode:
    index: int
    node: DiscoveryNode
    persisted: FlakyPersistedState
    settings: Settings
    coordinator: Coordinator | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    seq: int = 0
    boots: int = 0
    refused: str | None = None  # why the node refused to start from its storage; it then stays down
    watched: frozenset[str] = frozenset()  # the peers its coordinator last asked to watch (`WatchPeers`)
    version: NodeVersion = field(default_factory=newest)  # the release it runs (simulation/versions.py)
    refused_by_release: bool = False  # `refused` because its release does not read its store

    @property
    def address(self) -> str:
        return self.node.transport_address

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def alive(self) -> bool:
        return self.coordinator is not None

    def running(self) -> Coordinator:
        if self.coordinator is None:
            raise RuntimeError(f"{self.name} is not running")
        return self.coordinator
