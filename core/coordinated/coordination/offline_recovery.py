"""What `coordinated node-tool` does to a stopped node's state, as pure functions: when a quorum is lost for
good, or when a persisted setting is wrong and no master can be elected to change it.

Elasticsearch's `elasticsearch-node` does the same things:
- unsafe-bootstrap makes the node the sole voter of a new configuration under a new cluster UUID, keeping its
  keys and settings; the new UUID keeps the old cluster's other nodes from merging into it silently;
- detach-cluster forgets the node's term and cluster membership (term 0, cluster UUID not committed, a voting
  configuration that names no real node) so that it can only join a master elected by another cluster;
- remove-settings drops persistent settings from the node's copy of the cluster state. It keeps the state's
  term and version (elections compare those, so the copy can win no election it could not win before, and it
  lost no key) and gives it a new state_uuid whose parent is the old one: a master's diff against the old
  copy is then refused for a missing base and the full state is sent instead, so no node holds a state that
  differs from another node's under the same uuid.

Each is recorded by a history event written BEFORE the new record, so that a crash between the two writes
leaves a directory that the node loads either way, and the tool can be run again. The two resets' events carry
marks (`marks_term`, `marks_accepted`) that both the old and the new record satisfy, and they replace every
older mark (see `history.summarize_history`); remove-settings changes neither the term nor the accepted
(term, version), so its event needs none. The shell draws the UUIDs; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

import msgspec

from coordinated.coordination.counters import successor
from coordinated.coordination.history import NO_CLUSTER_UUID, RESET_EVENT_TYPES, EventType, HistoryEvent
from coordinated.coordination.state import ClusterState, CoordinationMetadata, VotingConfiguration
from coordinated.coordination.state_events import state_event

UNSAFE_BOOTSTRAP_SETTING = "cluster.metadata.unsafe-bootstrap"
# A voting configuration no real node can satisfy: the node cannot win an election, only join (as in Elasticsearch).
MUST_JOIN_ELECTED_MASTER = VotingConfiguration(("_must_join_elected_master_",))
UNSAFE_BOOTSTRAP_EVENT = EventType.UNSAFE_BOOTSTRAP
DETACHED_EVENT = EventType.DETACHED
SETTINGS_REMOVED_EVENT = EventType.SETTINGS_REMOVED
RESET_EVENTS: tuple[str, ...] = tuple(event_type.value for event_type in RESET_EVENT_TYPES)


class ToolRefusal(Exception):
    """The tool must not change this node's state; the message says why."""


@dataclass(frozen=True)
class Plan:
    current_term: int  # the new record's term
    state: ClusterState  # the new record's last-accepted state
    description: str  # what the tool will do, for the confirmation question
    event: dict[str, Any]  # the history event to append before the record is written


def describe_node(node_id: str, current_term: int, state: ClusterState) -> str:
    committed = "committed" if state.cluster_uuid_committed else "not committed"
    return (
        f"node [{node_id}] of cluster [{state.cluster_name}], cluster UUID [{state.cluster_uuid}] ({committed}); "
        f"current term {current_term}; last-accepted state (term, version) = ({state.term}, {state.version}); "
        f"last-committed voting configuration {list(state.last_committed_config.node_ids)}"
    )


def plan_unsafe_bootstrap(
    node_id: str, current_term: int, state: ClusterState, new_cluster_uuid: str, new_state_uuid: str
) -> Plan:
    if state.last_committed_config.is_empty():
        raise ToolRefusal(
            f"node [{node_id}] was never part of a bootstrapped cluster (its last-committed voting configuration "
            "is empty): there is nothing to recover; start it with cluster.initial_master_nodes instead"
        )
    known = state.nodes.get(node_id)
    if known is not None and not known.master_eligible:
        raise ToolRefusal(
            f"node [{node_id}] is not master-eligible (roles {list(known.roles)}): only a master-eligible node "
            "can become the sole voter of a new cluster"
        )
    version = successor(state.version)
    if version is None:
        raise ToolRefusal(
            f"node [{node_id}] holds a state of version {state.version}, the largest 64-bit version: a new state "
            "cannot follow it"
        )
    sole = VotingConfiguration.of([node_id])
    new_state = state.replace(
        cluster_uuid=new_cluster_uuid,
        cluster_uuid_committed=True,
        version=version,
        state_uuid=new_state_uuid,
        parent_uuid=state.state_uuid,
        master_node=None,
        nodes={node_id: known} if known is not None else {},
        coordination=CoordinationMetadata(
            term=state.term,
            last_committed_config=sole,
            last_accepted_config=sole,
            voting_config_exclusions=(),
        ),
        persistent_settings={**state.persistent_settings, UNSAFE_BOOTSTRAP_SETTING: "true"},
    )
    description = (
        f"This node: {describe_node(node_id, current_term, state)}.\n"
        f"It will become the only voter of a NEW cluster with UUID [{new_cluster_uuid}]: both voting "
        f"configurations become [{node_id}], voting config exclusions are cleared, its {len(state.kv)} keys and "
        f"{len(state.persistent_settings)} persistent settings are kept, and the setting "
        f"[{UNSAFE_BOOTSTRAP_SETTING}] is set to [true].\n"
        "Writes that the lost nodes acknowledged but this node never received are LOST. Nodes of the old "
        "cluster cannot join the new one until they are detached (detach-cluster) or wiped. If several nodes "
        "survived, run this on the one with the highest (term, version) and detach the others."
    )
    return Plan(
        current_term,
        new_state,
        description,
        _event(UNSAFE_BOOTSTRAP_EVENT, node_id, current_term, state, current_term, new_state),
    )


def plan_detach(node_id: str, current_term: int, state: ClusterState, new_state_uuid: str) -> Plan:
    if current_term == 0 and state.cluster_uuid == NO_CLUSTER_UUID and state.last_accepted_config.is_empty():
        raise ToolRefusal(f"node [{node_id}] never joined a cluster: there is nothing to detach it from")
    new_state = state.replace(
        cluster_uuid_committed=False,
        state_uuid=new_state_uuid,
        parent_uuid=state.state_uuid,
        master_node=None,
        coordination=CoordinationMetadata(
            term=0,
            last_committed_config=MUST_JOIN_ELECTED_MASTER,
            last_accepted_config=MUST_JOIN_ELECTED_MASTER,
            voting_config_exclusions=(),
        ),
    )
    description = (
        f"This node: {describe_node(node_id, current_term, state)}.\n"
        "It will be detached from its cluster: its term becomes 0, its cluster UUID is no longer committed and "
        "its voting configurations name no node, so it can only join a master elected by another cluster (for "
        "example one made by unsafe-bootstrap). Its keys and settings are replaced by that cluster's when it "
        "joins. Do not start it again among its old cluster's nodes: it would join whichever master it finds."
    )
    return Plan(0, new_state, description, _event(DETACHED_EVENT, node_id, current_term, state, 0, new_state))


def plan_remove_settings(
    node_id: str, current_term: int, state: ClusterState, patterns: Sequence[str], new_state_uuid: str
) -> Plan:
    """Remove the persistent settings that match any of `patterns` (`*` and `?` as in shell patterns)."""
    persisted = [name for name in state.persistent_settings if name != UNSAFE_BOOTSTRAP_SETTING]
    removed = sorted(name for name in persisted if any(fnmatchcase(name, pattern) for pattern in patterns))
    if not removed:
        held = sorted(persisted) or "none"
        raise ToolRefusal(f"no persistent setting of node [{node_id}] matches {list(patterns)}; it holds {held}")
    new_state = state.replace(
        state_uuid=new_state_uuid,
        parent_uuid=state.state_uuid,
        persistent_settings={k: v for k, v in state.persistent_settings.items() if k not in removed},
    )
    values = ", ".join(f"{name}: {state.persistent_settings[name]}" for name in removed)
    description = (
        f"This node: {describe_node(node_id, current_term, state)}.\n"
        f"These persistent settings will be removed from its copy of the cluster state: {values}. Its term, "
        f"version, voting configurations and {len(state.kv)} keys stay as they are; the nodes' own settings (-E) "
        "apply instead. A master-eligible node that still holds these settings and wins the next election "
        "brings them back: run this on every master-eligible node of the cluster, all stopped."
    )
    event = state_event(
        SETTINGS_REMOVED_EVENT,
        node_id,
        _name_of(node_id, state),
        new_state,
        current_term=current_term,
        previous_state_uuid=state.state_uuid,
        settings=tuple(removed),
    )
    return Plan(current_term, new_state, description, _shaped(event))


def _event(
    event_type: EventType, node_id: str, old_term: int, old: ClusterState, new_term: int, new: ClusterState
) -> dict[str, Any]:
    event = state_event(
        event_type,
        node_id,
        _name_of(node_id, old),
        new,
        cluster_uuid_committed=new.cluster_uuid_committed,
        master=None,
        current_term=new_term,
        previous_cluster_uuid=old.cluster_uuid,
        previous_term=old.term,
        previous_version=old.version,
        previous_state_uuid=old.state_uuid,
        # Both the old and the new record satisfy these, whichever of them is on disk after a crash.
        marks_term=min(old_term, new_term),
        marks_accepted=min(old.term_version(), new.term_version()),
    )
    return _shaped(event)


def _name_of(node_id: str, state: ClusterState) -> str:
    node = state.nodes.get(node_id)
    return node.name if node is not None else node_id


def _shaped(event: HistoryEvent) -> dict[str, Any]:
    """JSON-shaped (lists, not tuples), exactly as the history line will read back."""
    shaped: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(event))
    return shaped
