"""What the coordinator reports about itself, as one frozen snapshot (as etcd's `RawNode.Status()`).

The shells (metrics, the health and readiness answers, the transport's peer names) read only this and the
effects, never the components behind it, so a component can change without a shell noticing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from coordinated.coordination import client
from coordinated.coordination.client import ClusterError
from coordinated.coordination.context import Mode
from coordinated.coordination.node_versions import VersionStatus
from coordinated.coordination.state import ClusterState


class BlockLevel(StrEnum):
    """What `cluster.no_master_block` refuses while a node knows no master (in the order the setting lists them)."""

    ALL = "all"
    WRITE = "write"
    METADATA_WRITE = "metadata_write"


class HealthColour(StrEnum):
    GREEN = "green"  # a master, and every voter of the voting configurations is in the cluster
    YELLOW = "yellow"  # a master, but a voter is missing: the cluster works with less fault tolerance
    RED = "red"  # no master


@dataclass(frozen=True, slots=True)
class NoMasterBlock:
    """The no-master block as it stands on this node: which level is set, and whether it is in force."""

    level: BlockLevel
    in_force: bool  # the applied state names no master

    @property
    def refuses_local_reads(self) -> bool:
        """A `local` read of the applied state is refused too (level `all`)."""
        return self.in_force and self.level is BlockLevel.ALL

    def error(self) -> ClusterError:
        return client.no_master_error(self.level.value)


@dataclass(frozen=True, slots=True)
class CoordinatorStatus:
    node_id: str
    mode: Mode
    term: int
    leader: str | None  # the node id this node follows or is; None as a candidate
    applied_master: str | None  # the master the applied state names
    applied_version: int
    last_accepted_term: int
    last_accepted_version: int
    last_committed_version: int  # the version of the applied state, which is committed
    health: HealthColour
    no_master_block: NoMasterBlock
    formation_problem: str | None  # why this node has not joined a cluster; None with a master
    foreign_clusters: str | None  # peers of another cluster with the same name, as a problem to report
    peer_names: Mapping[str, str]  # transport address -> node name, of the peers discovery found
    # On the master only: per follower node name, versions of the applied state it has not reported applied.
    # Followers that reported nothing yet since this node became master are left out, not shown as behind.
    follower_lag: Mapping[str, int] | None
    state_bytes: int | None  # on the master: the applied state's size, if the master measured it
    max_state_bytes: int  # `cluster.metadata.max_state_size` as the applied state sets it
    elections_won: int
    failed_publications: int
    lagging_nodes_removed: int
    versions: VersionStatus  # this node's release and wire version, the cluster's, and every member's
    now: int  # the core's clock when the snapshot was taken


def health_of(state: ClusterState) -> HealthColour:
    if state.master_node is None:
        return HealthColour.RED
    config_ids = set(state.last_committed_config.node_ids) | set(state.last_accepted_config.node_ids)
    if all(node_id in state.nodes for node_id in config_ids):
        return HealthColour.GREEN
    return HealthColour.YELLOW


def follower_lag(state: ClusterState, local_id: str, reported: Mapping[str, int]) -> dict[str, int]:
    """Per follower: the applied version minus the version it last reported applied, both read at one moment."""
    return {
        node.name: max(0, state.version - reported[node_id])
        for node_id, node in state.nodes.items()
        if node_id != local_id and node_id in reported
    }
