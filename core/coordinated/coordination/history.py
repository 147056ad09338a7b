"""The history event: what a node records about its terms, elections and states, one JSON line each.

This is the contract between the node (sidecar or simulator), which writes histories, and the audit,
which reads them. The shell adds `seq` (per node, from 1, no gaps) and `ts` (seconds) to each event.
This module imports only msgspec, so the audit can use it without the rest of the core.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import msgspec

NO_CLUSTER_UUID = "_na_"  # the cluster UUID of a node that has not joined a bootstrapped cluster yet


class EventType(StrEnum):
    TERM = "term"  # the node joined a new term (voted in it)
    ELECTED = "elected"  # the node won the election of its term
    ACCEPTED = "accepted"  # the node accepted (persisted) a published state
    COMMITTED = "committed"  # a state committed: on the master with its `quorum`
    APPLIED = "applied"  # the state became visible on the node
    STEPPED_DOWN = "stepped_down"  # the master left LEADER mode, with a `reason`
    # Written offline by `coordinated node-tool` before it rewrites the node's record (see `offline_recovery`):
    UNSAFE_BOOTSTRAP = "unsafe_bootstrap"  # the node became the sole voter of a NEW cluster (cluster_uuid)
    DETACHED = "detached"  # the node forgot its term (0) and cluster membership, to join another cluster
    # The node's copy of its last-accepted state lost the persistent `settings`: same term, version and keys,
    # a new state_uuid (its parent is the copy it replaced), so that no diff is applied to it as if unchanged.
    SETTINGS_REMOVED = "settings_removed"
    # Recorded by the master when the state that makes the change is committed, with the `session` id:
    SESSION_CREATED = "session_created"
    SESSION_EXPIRED = "session_expired"  # the master heard no keepalive for the session's TTL
    SESSION_ENDED = "session_ended"  # ended by request, or its node left the cluster (`reason` says which)
    # Written by the node that served the snapshot API, with the state's term, version and `snapshot`:
    SNAPSHOT_TAKEN = "snapshot_taken"  # the committed state of `version` was written to a snapshot
    SNAPSHOT_RESTORED = "snapshot_restored"  # the state of `version` (committed) holds a snapshot's keys
    # Written by the node's history archive, with the object's `location` (s3://bucket/key):
    ARCHIVED = "archived"  # a closed history segment of this node is now in object storage
    # Written by the node's history itself (its term and configurations are the node's, like `term`):
    RETENTION_CUT = "retention_cut"  # segments before `first_kept_seq` were deleted on purpose (retention)
    HISTORY_LOST = "history_lost"  # events `first_lost_seq`..`last_lost_seq` were lost (a segment deleted
    # under the running node, or a write that failed); both carry the node's marks (`marks_term`, ...)
    # Written by the node at a graceful stop, once its core has stopped, with its current term: as master it
    # commits nothing more of that term (it can lead again only in a later one), so the audit settles what
    # it published and never committed, instead of waiting for a commit that cannot come.
    STOPPED = "stopped"


SESSION_EVENT_TYPES: tuple[EventType, ...] = (
    EventType.SESSION_CREATED,
    EventType.SESSION_EXPIRED,
    EventType.SESSION_ENDED,
)
STATE_EVENT_TYPES: tuple[EventType, ...] = (EventType.ACCEPTED, EventType.COMMITTED, EventType.APPLIED)
# An operator's reset of the node's coordination state: the node's term and cluster may start over after it.
RESET_EVENT_TYPES: tuple[EventType, ...] = (EventType.UNSAFE_BOOTSTRAP, EventType.DETACHED)
# Events that restate the node's marks (`marks_term`, `marks_accepted`) as lower bounds, adding to the others.
MARK_CARRYING_EVENT_TYPES: tuple[EventType, ...] = (EventType.RETENTION_CUT, EventType.HISTORY_LOST)

# Fields the shell adds to every event, right after `node`: a per-node sequence number and seconds.
SHELL_FIELDS: tuple[tuple[str, type], ...] = (("seq", int), ("ts", float))
# Fields for people reading a history; the audit does not rely on them (it reads `marks_accepted` of a
# `retention_cut`: the newest state the deleted segments may have held evidence about).
INFORMATIONAL_FIELDS = frozenset(
    {"node_name", "reason", "cluster_uuid_committed", "marks_term", "snapshot", "location", "settings"}
)


class HistoryEvent(msgspec.Struct, frozen=True, kw_only=True):
    cluster_uuid: str
    node: str  # node id
    node_name: str
    type: EventType
    term: int
    version: int | None = None  # state events only
    state_uuid: str | None = None
    parent_uuid: str | None = None
    master: str | None = None
    last_committed_config: tuple[str, ...]
    last_accepted_config: tuple[str, ...]
    quorum: tuple[str, ...] | None = None  # the master's committed events only
    reason: str | msgspec.UnsetType = msgspec.UNSET  # stepped_down and session events
    session: str | msgspec.UnsetType = msgspec.UNSET  # session events only: the session's id
    snapshot: str | msgspec.UnsetType = msgspec.UNSET  # snapshot events only: `repository:snapshot`
    location: str | msgspec.UnsetType = msgspec.UNSET  # archived events only: where the segment went
    settings: tuple[str, ...] | msgspec.UnsetType = msgspec.UNSET  # settings_removed only: the names removed
    # Reset events only: the record before the reset (`current_term` is the new record's term) ...
    current_term: int | msgspec.UnsetType = msgspec.UNSET
    cluster_uuid_committed: bool | msgspec.UnsetType = msgspec.UNSET
    previous_cluster_uuid: str | msgspec.UnsetType = msgspec.UNSET
    previous_term: int | msgspec.UnsetType = msgspec.UNSET
    previous_version: int | msgspec.UnsetType = msgspec.UNSET
    previous_state_uuid: str | msgspec.UnsetType = msgspec.UNSET
    # ... and the marks both the old and the new record satisfy, which replace every older mark on replay.
    # On `retention_cut` and `history_lost`: the newest marks the history held, which add to the others.
    marks_term: int | msgspec.UnsetType = msgspec.UNSET
    marks_accepted: tuple[int, int] | msgspec.UnsetType = msgspec.UNSET
    first_kept_seq: int | msgspec.UnsetType = msgspec.UNSET  # retention_cut only
    first_lost_seq: int | msgspec.UnsetType = msgspec.UNSET  # history_lost only
    last_lost_seq: int | msgspec.UnsetType = msgspec.UNSET
    # history_lost only, when a start skipped the seqs a damaged newest segment (this file name) may hold
    damaged_segment: str | msgspec.UnsetType = msgspec.UNSET

    def to_dict(self) -> dict[str, Any]:
        """The event as the JSON object of the history line (without `seq` and `ts`)."""
        encoded: dict[str, Any] = msgspec.to_builtins(self)
        return encoded
