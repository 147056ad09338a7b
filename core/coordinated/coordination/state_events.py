"""The history event about one state, built in one place for the writers outside the core's step loop: the node
tool, the startup recovery and the snapshot API (the components record theirs through `CoreContext`)."""

from __future__ import annotations

from typing import Any

from coordinated.coordination.history import EventType, HistoryEvent
from coordinated.coordination.state import ClusterState


def state_event(
    event_type: EventType, node_id: str, node_name: str, state: ClusterState, **fields: Any
) -> HistoryEvent:
    """An event of `event_type` about `state`, recorded by node `node_id`; `fields` are the type's own (and may
    override `master`)."""
    return HistoryEvent(
        **{
            "cluster_uuid": state.cluster_uuid,
            "node": node_id,
            "node_name": node_name,
            "type": event_type,
            "term": state.term,
            "version": state.version,
            "state_uuid": state.state_uuid,
            "parent_uuid": state.parent_uuid,
            "master": state.master_node,
            "last_committed_config": state.last_committed_config.node_ids,
            "last_accepted_config": state.last_accepted_config.node_ids,
            **fields,
        }
    )
