"""What every component of the core is given: the node's identity, its clock and timers, and the few
callbacks through which it talks to the rest of the node. Components never import the coordinator.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from coordinated.coordination.effects import Effect, Log, RecordHistory, Send
from coordinated.coordination.foreign_clusters import ForeignClusters
from coordinated.coordination.history import NO_CLUSTER_UUID, EventType, HistoryEvent
from coordinated.coordination.messages import Message
from coordinated.coordination.node_versions import NodeVersions
from coordinated.coordination.settings import Settings
from coordinated.coordination.state import ClusterState, Derivations, DiscoveryNode
from coordinated.coordination.timers import Timers


class Mode(StrEnum):
    CANDIDATE = "CANDIDATE"
    LEADER = "LEADER"
    FOLLOWER = "FOLLOWER"


@dataclass
class CoreContext:
    local_node: DiscoveryNode
    base_settings: Settings
    timers: Timers
    rng: random.Random
    emit: Callable[[Effect], None]  # an effect for the shell, in order
    loopback: Callable[[str, Message], None]  # a message to this node itself, handled within the same step
    new_request_id: Callable[[], int]
    current_settings: Callable[[], Settings]  # with the dynamic values of the applied state
    accepted_state: Callable[[], ClusterState]
    term: Callable[[], int]
    mode: Callable[[], Mode]
    versions: NodeVersions  # this node's release and wire version, and what it knows of the other nodes'
    now: int = 0
    foreign_clusters: ForeignClusters = field(default_factory=ForeignClusters)  # peers of other clusters
    derivations: Derivations = field(default_factory=Derivations)  # the node's: its shell's stores read it too

    @property
    def settings(self) -> Settings:
        return self.current_settings()

    @property
    def accepted(self) -> ClusterState:
        return self.accepted_state()

    @property
    def current_term(self) -> int:
        return self.term()

    def send(self, address: str, message: Message) -> None:
        if address == self.local_node.transport_address:
            self.loopback(address, message)
        else:
            self.emit(Send(address, message))

    def log(self, level: str, message: str) -> None:
        self.emit(Log(level, message))

    def record_history(
        self,
        event_type: EventType,
        state: ClusterState | None = None,
        quorum: tuple[str, ...] | None = None,
        **fields: Any,
    ) -> None:
        """Record an event about `state`, or about the node's term and accepted configuration. `fields` are the
        event's optional fields (`reason`, `session`)."""
        basis = state or self.accepted
        event = HistoryEvent(
            cluster_uuid=basis.cluster_uuid,
            node=self.local_node.id,
            node_name=self.local_node.name,
            type=event_type,
            term=basis.term if state is not None else self.current_term,
            version=state.version if state is not None else None,
            state_uuid=state.state_uuid if state is not None else None,
            parent_uuid=state.parent_uuid if state is not None else None,
            master=state.master_node if state is not None else None,
            last_committed_config=basis.last_committed_config.node_ids,
            last_accepted_config=basis.last_accepted_config.node_ids,
            quorum=quorum,
            **fields,
        )
        self.emit(RecordHistory(event))

    def committed_uuid(self) -> str:
        """This node's cluster UUID once committed; until then the "no cluster yet" marker."""
        state = self.accepted
        return state.cluster_uuid if state.cluster_uuid_committed else NO_CLUSTER_UUID

    def foreign(self, cluster_uuid: str, sender: str) -> bool:
        """A message from a node of another cluster: its terms must not disturb this one."""
        ours = self.committed_uuid()
        if NO_CLUSTER_UUID in (ours, cluster_uuid) or ours == cluster_uuid:
            if ours == cluster_uuid != NO_CLUSTER_UUID:
                self.foreign_clusters.agrees(sender)
            return False
        warning = self.foreign_clusters.saw(sender, cluster_uuid, ours, self.now)  # reported in health, too
        debug = f"ignoring {sender}: it belongs to cluster [{cluster_uuid}], this node to [{ours}]"
        self.log("warning" if warning else "debug", warning or debug)
        return True

    def node_id_at(self, address: str) -> str | None:
        for node in self.accepted.nodes.values():
            if node.transport_address == address:
                return node.id
        return None
