"""The immutable, versioned cluster state, its voting configurations, and its diffs.

A state is never mutated: every change builds a new `ClusterState`. Two states with the same
(term, version) published by the same master are the same state; `state_uuid` names it and
`parent_uuid` names the state it was derived from, which is what the audit's chain check follows.

The state's maps (`MAP_FIELDS`) are persistent maps (`immutables.Map`, a hash array mapped trie): a new
state shares every untouched entry with the state it was derived from, so deriving a state, applying a
diff and computing the diff between a state and one derived from it cost in proportion to the change, not
to the number of keys. They encode as JSON objects with sorted keys, exactly as the dicts they replaced.
"""

from __future__ import annotations

import weakref
from collections.abc import Collection, Iterable, Mapping, Sequence
from itertools import pairwise
from typing import Annotated, Any

import immutables
import msgspec

from coordinated.coordination.counters import LONG_MAX
from coordinated.coordination.history import NO_CLUSTER_UUID
from coordinated.coordination.settings import format_time_ms
from coordinated.coordination.wire_versions import NodeVersion

# Terms, versions and request ids are 64-bit signed integers, as in Elasticsearch (and never negative). A
# message or record holding a number outside that range fails to decode, so it is refused before it can
# reach the core or be persisted. How far a decoded term or version may move a node is `counters.reach`.
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


class Repository(msgspec.Struct, frozen=True, omit_defaults=True):
    """A registered snapshot repository (`PUT /_snapshot/{repo}`): `fs` with its `location`, or `s3` with its
    `bucket`, `base_path` and `client` (the name of the node-level `s3.client.NAME` settings it uses). Fields
    that a type does not use are left empty and not encoded, so an `fs` repository encodes as it always did."""

    type: str
    location: str = ""
    bucket: str = ""
    base_path: str = ""
    client: str = ""


# A key written before keys carried versions (a state persisted by an older release) has no entry in
# `kv_versions`. Every node must see the same version for it, so it is a constant rather than something a
# node derives from the state it happened to load; its next write gives it a real version, which is larger.
LEGACY_KEY_VERSION = KeyVersion(1, 1)


# The state's fields that hold persistent maps and travel in a diff as a `MapDiff` each (upserts and
# deletes), under the same name in `ClusterStateDiff`. A new map field is added here and to both structs.
MAP_FIELDS: tuple[str, ...] = ("persistent_settings", "kv", "kv_versions", "sessions", "kv_sessions")
EMPTY_MAP: immutables.Map[str, Any] = immutables.Map()


def persistent(mapping: Mapping[str, Any]) -> immutables.Map[str, Any]:
    """The mapping as a persistent map: itself if it is one (no copy), else a one-off conversion."""
    if isinstance(mapping, immutables.Map):
        return mapping
    return immutables.Map(mapping) if mapping else EMPTY_MAP


class Session(msgspec.Struct, frozen=True, omit_defaults=True):
    """A client's session. A TTL session lives while the master hears keepalives; a node session while its
    node is in the cluster. Its ephemeral keys (`ClusterState.kv_sessions`) end with it, in the same state."""

    ttl_ms: Long = 0  # a TTL session's time to live; 0 for a node session
    node: str | None = None  # a node session's node id
    create_version: Long = 0
    # A TTL session's remaining TTL at its master's last checkpoint, from which a new master continues it;
    # None: the whole TTL (a keepalive came since). See coordination/sessions.py.
    remaining_ms: Long | None = None


class ClusterState(msgspec.Struct, frozen=True, weakref=True):
    cluster_name: str
    cluster_uuid: str = NO_CLUSTER_UUID
    cluster_uuid_committed: bool = False
    version: Long = 0
    state_uuid: str = NO_CLUSTER_UUID
    parent_uuid: str | None = None
    master_node: str | None = None
    nodes: dict[str, DiscoveryNode] = {}
    coordination: CoordinationMetadata = CoordinationMetadata()
    # The maps of MAP_FIELDS: declared as mappings (decoded as dicts, validated), held as persistent maps.
    persistent_settings: Mapping[str, str] = EMPTY_MAP
    kv: Mapping[str, Any] = EMPTY_MAP
    kv_versions: Mapping[str, KeyVersion] = EMPTY_MAP  # for each key of `kv`; see LEGACY_KEY_VERSION
    sessions: Mapping[str, Session] = EMPTY_MAP
    kv_sessions: Mapping[str, str] = EMPTY_MAP  # an ephemeral key of `kv` -> the id of its session
    # Cluster-wide metadata, as Elasticsearch keeps repositories, so that every node knows them. A handful:
    # a plain dict, sent whole in a diff when it changes (as `nodes`).
    repositories: dict[str, Repository] = {}
    # Fields added after the first release, each gated on a feature (`feature_gates.STATE_FIELD_GATES`): UNSET,
    # and so left out of every encoding, until the master sets it once every node has that feature.
    # Every member's release and wire version (`node_versions`): a handful, sent whole in a diff when it changes.
    node_versions: dict[str, NodeVersion] | msgspec.UnsetType = msgspec.UNSET

    def __post_init__(self) -> None:
        # A state built from dicts (decoded, or by a caller) holds persistent maps from then on.
        for name in MAP_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, immutables.Map):
                msgspec.structs.force_setattr(self, name, persistent(value))

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
    repositories: dict[str, Repository] | None = None  # None: unchanged
    # A gated field (see ClusterState), whole when it changed; None: unchanged. Once set it stays set.
    node_versions: dict[str, NodeVersion] | None = None


def _changed_field(before: Any, after: Any) -> Any:
    """A small gated field of a diff: None when unchanged (or unset), else its new value."""
    return None if after is msgspec.UNSET or before is after or before == after else after


def diff_maps(before: Mapping[str, Any], after: Mapping[str, Any]) -> MapDiff:
    """The full comparison of two maps: O(keys). `compute_diff` avoids it for states derived one from another."""
    if before is after:
        return MapDiff()
    upserts = {key: value for key, value in after.items() if key not in before or before[key] != value}
    deletes = tuple(sorted(key for key in before if key not in after))
    return MapDiff(upserts, deletes)


def apply_map_diff(base: Mapping[str, Any], diff: MapDiff | KeyVersionsDiff | SessionsDiff) -> immutables.Map[str, Any]:
    """The base map with the diff applied, sharing every untouched entry with the base: O(change)."""
    merged = persistent(base)
    if not diff.upserts and not diff.deletes:
        return merged
    mutation = merged.mutate()
    for key in diff.deletes:
        mutation.pop(key, None)
    for key, value in diff.upserts.items():
        mutation[key] = value
    return mutation.finish()


# The diff type of each map field (its values' type, for decoding).
_MAP_DIFF_TYPES: dict[str, type[MapDiff] | type[KeyVersionsDiff] | type[SessionsDiff]] = {
    "persistent_settings": MapDiff,
    "kv": MapDiff,
    "kv_versions": KeyVersionsDiff,
    "sessions": SessionsDiff,
    "kv_sessions": MapDiff,
}
assert tuple(_MAP_DIFF_TYPES) == MAP_FIELDS


def _typed_map_diff(name: str, upserts: dict[str, Any], deletes: tuple[str, ...]) -> Any:
    return _MAP_DIFF_TYPES[name](upserts, deletes)


def diff_between(
    before: ClusterState, after: ClusterState, map_changes: Mapping[str, tuple[dict[str, Any], tuple[str, ...]]]
) -> ClusterStateDiff:
    """The diff from `before` to `after` given the changes of each map field (missing: unchanged).

    The caller vouches that applying these upserts and deletes to `before`'s maps gives `after`'s.
    """
    maps = {name: _typed_map_diff(name, *map_changes[name]) for name in MAP_FIELDS if name in map_changes}
    return ClusterStateDiff(
        base_uuid=before.state_uuid,
        state_uuid=after.state_uuid,
        parent_uuid=after.parent_uuid,
        version=after.version,
        cluster_uuid=after.cluster_uuid,
        cluster_uuid_committed=after.cluster_uuid_committed,
        master_node=after.master_node,
        coordination=after.coordination,
        nodes=None if before.nodes is after.nodes or before.nodes == after.nodes else after.nodes,
        repositories=(
            None
            if before.repositories is after.repositories or before.repositories == after.repositories
            else after.repositories
        ),
        node_versions=_changed_field(before.node_versions, after.node_versions),
        **maps,
    )


# How many derivation steps a diff follows before it compares the maps instead.
MAX_DERIVATION_STEPS = 1024
_Derivation = tuple["weakref.ref[ClusterState]", "weakref.ref[ClusterState]", "ClusterStateDiff"]


class Derivations:
    """How states were derived from one another on one node: id(derived) -> (derived, base, diff), both held
    weakly, so that an entry lives exactly as long as the derived state and holds no state alive. It lets
    `compute_diff` answer in proportion to the change instead of comparing every key.

    One per node, owned by it: its core records what its batches and `apply_diff` derive, and its stores read
    the same instance. Not to be shared between threads."""

    def __init__(self) -> None:
        self._recorded: dict[int, _Derivation] = {}

    def record(self, base: ClusterState, derived: ClusterState, diff: ClusterStateDiff) -> None:
        """Remember that applying `diff` to `base` gives `derived`."""
        key, recorded = id(derived), self._recorded

        def forget(ref: weakref.ref[ClusterState]) -> None:
            entry = recorded.get(key)
            if entry is not None and entry[0] is ref:
                del recorded[key]

        recorded[key] = (weakref.ref(derived, forget), weakref.ref(base), diff)

    def chain(self, before: ClusterState, after: ClusterState) -> list[ClusterStateDiff] | None:
        """The recorded diffs leading from `before` to `after`, oldest first; None if they are not all known."""
        chain: list[ClusterStateDiff] = []
        state = after
        while state is not before:
            entry = self._recorded.get(id(state))
            if entry is None or entry[0]() is not state or len(chain) >= MAX_DERIVATION_STEPS:
                return None
            parent = entry[1]()
            if parent is None:
                return None
            chain.append(entry[2])
            state = parent
        chain.reverse()
        return chain

    def __len__(self) -> int:
        return len(self._recorded)


def compose_diffs(diffs: Sequence[ClusterStateDiff]) -> ClusterStateDiff:
    """One diff with the effect of applying `diffs` in order: O(their total size)."""
    for earlier, later in pairwise(diffs):
        if later.base_uuid != earlier.state_uuid:
            raise IncompatibleDiffError(f"diff to [{later.state_uuid}] does not follow [{earlier.state_uuid}]")
    if len(diffs) == 1:
        return diffs[0]
    last = diffs[-1]
    changes: dict[str, tuple[dict[str, Any], set[str]]] = {}
    nodes = repositories = node_versions = None
    for diff in diffs:
        if diff.nodes is not None:
            nodes = diff.nodes
        if diff.repositories is not None:
            repositories = diff.repositories
        if diff.node_versions is not None:
            node_versions = diff.node_versions
        for name in MAP_FIELDS:
            step: MapDiff | KeyVersionsDiff | SessionsDiff = getattr(diff, name)
            if not step.upserts and not step.deletes:
                continue
            upserts, deletes = changes.setdefault(name, ({}, set()))
            for key in step.deletes:
                upserts.pop(key, None)
                deletes.add(key)
            for key, value in step.upserts.items():
                deletes.discard(key)
                upserts[key] = value
    maps = {
        name: _typed_map_diff(name, upserts, tuple(sorted(deletes))) for name, (upserts, deletes) in changes.items()
    }
    return msgspec.structs.replace(
        last,
        base_uuid=diffs[0].base_uuid,
        nodes=nodes,
        repositories=repositories,
        node_versions=node_versions,
        **maps,
    )


def compute_diff(before: ClusterState, after: ClusterState, derivations: Derivations | None = None) -> ClusterStateDiff:
    """What changed from `before` to `after`. In proportion to the change when `derivations` recorded how
    `after` was derived from `before` (by a batch, `apply_diff` or a chain of them); otherwise every key is
    compared."""
    chain = derivations.chain(before, after) if derivations is not None else None
    if chain is not None and chain:
        return compose_diffs(chain)
    return diff_between(
        before,
        after,
        {
            name: (map_diff.upserts, map_diff.deletes)
            for name in MAP_FIELDS
            if not (map_diff := diff_maps(getattr(before, name), getattr(after, name))).is_empty()
        },
    )


def apply_diff(base: ClusterState, diff: ClusterStateDiff, derivations: Derivations | None = None) -> ClusterState:
    """The state `diff` leads to from `base`, recorded in `derivations` if given."""
    if base.state_uuid != diff.base_uuid:
        raise IncompatibleDiffError(
            f"diff is based on state [{diff.base_uuid}] but this node holds state [{base.state_uuid}]"
        )
    derived = ClusterState(
        cluster_name=base.cluster_name,
        cluster_uuid=diff.cluster_uuid,
        cluster_uuid_committed=diff.cluster_uuid_committed,
        version=diff.version,
        state_uuid=diff.state_uuid,
        parent_uuid=diff.parent_uuid,
        master_node=diff.master_node,
        nodes=base.nodes if diff.nodes is None else diff.nodes,
        coordination=diff.coordination,
        **{name: apply_map_diff(getattr(base, name), getattr(diff, name)) for name in MAP_FIELDS},
        repositories=base.repositories if diff.repositories is None else diff.repositories,
        node_versions=base.node_versions if diff.node_versions is None else diff.node_versions,
    )
    if derivations is not None:
        derivations.record(base, derived, diff)
    return derived


def _encode_hook(value: Any) -> Any:
    if isinstance(value, immutables.Map):
        return dict(value.items())  # encoded with sorted keys, as any dict
    raise NotImplementedError(f"cannot encode a {type(value).__name__}")


# Deterministic: the same state always encodes to the same bytes (sorted keys), whatever its maps' type.
_ENCODER = msgspec.json.Encoder(order="sorted", enc_hook=_encode_hook)
# For messages and records that embed a state or a diff (the key order does not matter there).
ENCODE_HOOK = _encode_hook
_STATE_DECODER = msgspec.json.Decoder(ClusterState)
_DIFF_DECODER = msgspec.json.Decoder(ClusterStateDiff)


class StateEncoder:
    """Encodes states deterministically, keeping the maps of the last state encoded as plain dicts and moving
    them forward to the next state encoded.

    Walking a persistent map is slower than walking a dict, and sorting keys that arrive in hash order is
    slower than sorting keys that are nearly in order. So the plain dicts are built once (in key order) and
    then patched with the diffs that `derivations` recorded from the last state to the next: encoding the
    states a node accepts one after the other costs msgspec's encoding of dicts plus the change, as with dict
    maps. One per owner (it keeps state between calls), not to be shared between threads.
    """

    def __init__(self, derivations: Derivations) -> None:
        self.derivations = derivations
        self.state: weakref.ref[ClusterState] | None = None
        self.maps: dict[str, tuple[immutables.Map[str, Any], dict[str, Any]]] = {}

    def encode(self, state: ClusterState) -> bytes:
        fields = _set_fields(state)
        fields.update(self._moved_to(state))
        return _ENCODER.encode(fields)

    def _moved_to(self, state: ClusterState) -> dict[str, dict[str, Any]]:
        previous = self.state() if self.state is not None else None
        chain = self.derivations.chain(previous, state) if previous is not None else None
        plain: dict[str, dict[str, Any]] = {}
        for name in MAP_FIELDS:
            current: immutables.Map[str, Any] = getattr(state, name)
            cached = self.maps.get(name)
            if cached is not None and cached[0] is current:
                plain[name] = cached[1]
                continue
            if cached is not None and chain is not None:
                patched = cached[1]
                for diff in chain:
                    step: MapDiff | KeyVersionsDiff | SessionsDiff = getattr(diff, name)
                    for key in step.deletes:
                        patched.pop(key, None)
                    patched.update(step.upserts)
            else:
                patched = _sorted_dict(current)
            self.maps[name] = (current, patched)
            plain[name] = patched
        self.state = weakref.ref(state)
        return plain


def _set_fields(state: ClusterState) -> dict[str, Any]:
    """The state's fields as a dict, without the gated ones that are unset (as msgspec encodes the struct)."""
    return {name: value for name, value in msgspec.structs.asdict(state).items() if value is not msgspec.UNSET}


def _sorted_dict(mapping: immutables.Map[str, Any]) -> dict[str, Any]:
    return {key: mapping[key] for key in sorted(mapping)}


def encode_state(state: ClusterState) -> bytes:
    """Deterministic, compact JSON: the same state always encodes to the same bytes (fields and keys sorted).
    A node that encodes state after state keeps a `StateEncoder`, which costs in proportion to the change."""
    fields = _set_fields(state)
    fields.update({name: _sorted_dict(getattr(state, name)) for name in MAP_FIELDS})
    return _ENCODER.encode(fields)


def decode_state(data: bytes) -> ClusterState:
    return _STATE_DECODER.decode(data)


def encode_diff(diff: ClusterStateDiff) -> bytes:
    return _ENCODER.encode(diff)


def decode_diff(data: bytes) -> ClusterStateDiff:
    return _DIFF_DECODER.decode(data)


def initial_state(cluster_name: str) -> ClusterState:
    return ClusterState(cluster_name=cluster_name)


def session_binding_to_api(ttl_ms: int, node_id: str | None, nodes: Mapping[str, DiscoveryNode]) -> dict[str, Any]:
    """What a session lives by, as the API shows it: `{"ttl"}` for a TTL session, `{"node", "node_id"}` for a
    node session (the node's name while it is in `nodes`)."""
    if node_id is None:
        return {"ttl": format_time_ms(ttl_ms)}
    known = nodes.get(node_id)
    return {"node": known.name if known else node_id, "node_id": node_id}


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
            "kv": dict(state.kv),
            "sessions": {
                session_id: {
                    **session_binding_to_api(session.ttl_ms, session.node, state.nodes),
                    "create_version": session.create_version,
                    **({} if session.remaining_ms is None else {"checkpoint_remaining_ms": session.remaining_ms}),
                }
                for session_id, session in sorted(state.sessions.items())
            },
            "ephemeral_keys": dict(sorted(state.kv_sessions.items())),
            "repositories": {
                name: {"type": repo.type, "settings": {"location": repo.location}}
                for name, repo in sorted(state.repositories.items())
            },
        },
    }
