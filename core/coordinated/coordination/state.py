"""The immutable, versioned cluster state, its voting configurations, and its diffs.

A state is never mutated: every change builds a new `ClusterState`. Two states with the same
(term, version) published by the same master are the same state; `state_uuid` names it and
`parent_uuid` names the state it was derived from, which is what the audit's chain check follows.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Annotated, Any

import msgspec

from coordinated.coordination.history import NO_CLUSTER_UUID

# Terms, versions and request ids are 64-bit signed integers, as in Elasticsearch (and never negative). A
# message or record holding a number outside that range fails to decode, so it is refused before it can
# reach the core or be persisted.
LONG_MAX = 2**63 - 1
Long = Annotated[int, msgspec.Meta(ge=0, le=LONG_MAX)]
# A bootstrap placeholder stands in for a named initial master node that has not been discovered yet.
PLACEHOLDER_PREFIX = "{bootstrap-placeholder}-"


class VotingConfiguration(msgspec.Struct, frozen=True, array_like=True):
    """A set of master-eligible node ids whose majorities make quorums."""

    node_ids: tuple[str, ...] = ()

    @classmethod
    def of(cls, node_ids: Iterable[str]) -> VotingConfiguration:
        return cls(tuple(sorted(set(node_ids))))

    def has_quorum(self, votes: Collection[str]) -> bool:
        """More than half of this configuration voted. An empty configuration never has a quorum."""
        granted = sum(1 for node_id in self.node_ids if node_id in votes)
        return granted * 2 > len(self.node_ids)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.node_ids

    def __len__(self) -> int:
        return len(self.node_ids)

    def is_empty(self) -> bool:
        return not self.node_ids


EMPTY_CONFIG = VotingConfiguration()


class VotingConfigExclusion(msgspec.Struct, frozen=True):
    node_id: str
    node_name: str


class CoordinationMetadata(msgspec.Struct, frozen=True):
    term: Long = 0
    last_committed_config: VotingConfiguration = EMPTY_CONFIG
    last_accepted_config: VotingConfiguration = EMPTY_CONFIG
    voting_config_exclusions: tuple[VotingConfigExclusion, ...] = ()

    def excluded_ids(self) -> frozenset[str]:
        return frozenset(exclusion.node_id for exclusion in self.voting_config_exclusions)


class DiscoveryNode(msgspec.Struct, frozen=True):
    id: str
    name: str
    transport_address: str
    roles: tuple[str, ...] = ("master",)

    @property
    def master_eligible(self) -> bool:
        return "master" in self.roles


class KeyVersion(msgspec.Struct, frozen=True, array_like=True):
    """The state versions of the write that last changed a key and of the write that created it."""

    version: Long
    create_version: Long


# A key written before keys carried versions (a state persisted by an older release) has no entry in
# `kv_versions`. Every node must see the same version for it, so it is a constant rather than something a
# node derives from the state it happened to load; its next write gives it a real version, which is larger.
LEGACY_KEY_VERSION = KeyVersion(1, 1)


class Session(msgspec.Struct, frozen=True, omit_defaults=True):
    """A client's session. A TTL session lives while the master hears keepalives; a node session while its
    node is in the cluster. Its ephemeral keys (`ClusterState.kv_sessions`) end with it, in the same state."""

    ttl_ms: Long = 0  # a TTL session's time to live; 0 for a node session
    node: str | None = None  # a node session's node id
    create_version: Long = 0


class ClusterState(msgspec.Struct, frozen=True):
    cluster_name: str
    cluster_uuid: str = NO_CLUSTER_UUID
    cluster_uuid_committed: bool = False
    version: Long = 0
    state_uuid: str = NO_CLUSTER_UUID
    parent_uuid: str | None = None
    master_node: str | None = None
    nodes: dict[str, DiscoveryNode] = {}
    coordination: CoordinationMetadata = CoordinationMetadata()
    persistent_settings: dict[str, str] = {}
    kv: dict[str, Any] = {}
    kv_versions: dict[str, KeyVersion] = {}  # for each key of `kv`; see LEGACY_KEY_VERSION
    sessions: dict[str, Session] = {}
    kv_sessions: dict[str, str] = {}  # an ephemeral key of `kv` -> the id of its session

    def key_version(self, key: str) -> KeyVersion | None:
        """The versions of a key, None if it does not exist."""
        if key not in self.kv:
            return None
        return self.kv_versions.get(key, LEGACY_KEY_VERSION)

    @property
    def term(self) -> int:
        return self.coordination.term

    @property
    def last_committed_config(self) -> VotingConfiguration:
        return self.coordination.last_committed_config

    @property
    def last_accepted_config(self) -> VotingConfiguration:
        return self.coordination.last_accepted_config

    def term_version(self) -> tuple[int, int]:
        return (self.coordination.term, self.version)

    def master_eligible_nodes(self) -> list[DiscoveryNode]:
        return [node for node in self.nodes.values() if node.master_eligible]

    def replace(self, **changes: Any) -> ClusterState:
        return msgspec.structs.replace(self, **changes)


class IncompatibleDiffError(ValueError):
    """A diff was offered against a state this node does not hold."""


class MapDiff(msgspec.Struct, frozen=True, omit_defaults=True):
    upserts: dict[str, Any] = {}
    deletes: tuple[str, ...] = ()

    def is_empty(self) -> bool:
        return not self.upserts and not self.deletes


class KeyVersionsDiff(msgspec.Struct, frozen=True, omit_defaults=True):
    upserts: dict[str, KeyVersion] = {}
    deletes: tuple[str, ...] = ()


class SessionsDiff(msgspec.Struct, frozen=True, omit_defaults=True):
    upserts: dict[str, Session] = {}
    deletes: tuple[str, ...] = ()


class ClusterStateDiff(msgspec.Struct, frozen=True, omit_defaults=True):
    """What changed between two states. Small parts are sent whole; the maps are sent as changes."""

    base_uuid: str
    state_uuid: str
    parent_uuid: str | None
    version: Long
    cluster_uuid: str
    cluster_uuid_committed: bool
    master_node: str | None
    coordination: CoordinationMetadata
    nodes: dict[str, DiscoveryNode] | None = None  # None: unchanged
    persistent_settings: MapDiff = MapDiff()
    kv: MapDiff = MapDiff()
    kv_versions: KeyVersionsDiff = KeyVersionsDiff()
    sessions: SessionsDiff = SessionsDiff()
    kv_sessions: MapDiff = MapDiff()


def diff_maps(before: Mapping[str, Any], after: Mapping[str, Any]) -> MapDiff:
    if before is after:
        return MapDiff()
    upserts = {key: value for key, value in after.items() if key not in before or before[key] != value}
    deletes = tuple(key for key in before if key not in after)
    return MapDiff(upserts, deletes)


def apply_map_diff(base: dict[str, Any], diff: MapDiff) -> dict[str, Any]:
    if diff.is_empty():
        return base
    merged = dict(base)
    for key in diff.deletes:
        merged.pop(key, None)
    merged.update(diff.upserts)
    return merged


def compute_diff(before: ClusterState, after: ClusterState) -> ClusterStateDiff:
    return ClusterStateDiff(
        base_uuid=before.state_uuid,
        state_uuid=after.state_uuid,
        parent_uuid=after.parent_uuid,
        version=after.version,
        cluster_uuid=after.cluster_uuid,
        cluster_uuid_committed=after.cluster_uuid_committed,
        master_node=after.master_node,
        coordination=after.coordination,
        nodes=None if before.nodes == after.nodes else after.nodes,
        persistent_settings=diff_maps(before.persistent_settings, after.persistent_settings),
        kv=diff_maps(before.kv, after.kv),
        kv_versions=KeyVersionsDiff(**msgspec.structs.asdict(diff_maps(before.kv_versions, after.kv_versions))),
        sessions=SessionsDiff(**msgspec.structs.asdict(diff_maps(before.sessions, after.sessions))),
        kv_sessions=diff_maps(before.kv_sessions, after.kv_sessions),
    )


def apply_diff(base: ClusterState, diff: ClusterStateDiff) -> ClusterState:
    if base.state_uuid != diff.base_uuid:
        raise IncompatibleDiffError(
            f"diff is based on state [{diff.base_uuid}] but this node holds state [{base.state_uuid}]"
        )
    return ClusterState(
        cluster_name=base.cluster_name,
        cluster_uuid=diff.cluster_uuid,
        cluster_uuid_committed=diff.cluster_uuid_committed,
        version=diff.version,
        state_uuid=diff.state_uuid,
        parent_uuid=diff.parent_uuid,
        master_node=diff.master_node,
        nodes=base.nodes if diff.nodes is None else diff.nodes,
        coordination=diff.coordination,
        persistent_settings=apply_map_diff(base.persistent_settings, diff.persistent_settings),
        kv=apply_map_diff(base.kv, diff.kv),
        kv_versions=apply_map_diff(base.kv_versions, MapDiff(diff.kv_versions.upserts, diff.kv_versions.deletes)),
        sessions=apply_map_diff(base.sessions, MapDiff(diff.sessions.upserts, diff.sessions.deletes)),
        kv_sessions=apply_map_diff(base.kv_sessions, diff.kv_sessions),
    )


_ENCODER = msgspec.json.Encoder(order="sorted")
_STATE_DECODER = msgspec.json.Decoder(ClusterState)
_DIFF_DECODER = msgspec.json.Decoder(ClusterStateDiff)


def encode_state(state: ClusterState) -> bytes:
    """Deterministic, compact JSON: the same state always encodes to the same bytes."""
    return _ENCODER.encode(state)


def decode_state(data: bytes) -> ClusterState:
    return _STATE_DECODER.decode(data)


def encode_diff(diff: ClusterStateDiff) -> bytes:
    return _ENCODER.encode(diff)


def decode_diff(data: bytes) -> ClusterStateDiff:
    return _DIFF_DECODER.decode(data)


def initial_state(cluster_name: str) -> ClusterState:
    return ClusterState(cluster_name=cluster_name)


def state_to_api(state: ClusterState) -> dict[str, Any]:
    """The `GET /_cluster/state` shape (docs/sidecar.md, Client API)."""
    coordination = state.coordination
    return {
        "cluster_name": state.cluster_name,
        "cluster_uuid": state.cluster_uuid,
        "version": state.version,
        "term": coordination.term,
        "state_uuid": state.state_uuid,
        "master_node": state.master_node,
        "nodes": {
            node_id: {"name": node.name, "transport_address": node.transport_address, "roles": list(node.roles)}
            for node_id, node in sorted(state.nodes.items())
        },
        "metadata": {
            "cluster_uuid": state.cluster_uuid,
            "cluster_uuid_committed": state.cluster_uuid_committed,
            "cluster_coordination": {
                "term": coordination.term,
                "last_committed_config": list(coordination.last_committed_config.node_ids),
                "last_accepted_config": list(coordination.last_accepted_config.node_ids),
                "voting_config_exclusions": [
                    {"node_id": e.node_id, "node_name": e.node_name} for e in coordination.voting_config_exclusions
                ],
            },
            "persistent_settings": dict(state.persistent_settings),
            "kv": state.kv,
        },
    }
