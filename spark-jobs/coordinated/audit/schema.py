"""The history schema (docs/protocol.md) as an explicit Spark schema, and the names the report uses."""

from __future__ import annotations

from pyspark.sql import types as T

from coordinated.coordination.history import NO_CLUSTER_UUID, STATE_EVENT_TYPES, EventType

# Report names (a contract: docs/audit.md). The order is the order of the report.
ONE_MASTER = "one-master-per-term"
UNIQUE_STATE = "unique-state-per-version"
COMMITTED_CHAIN = "committed-chain"
APPLIED_COMMITTED = "applied-only-committed"
NODE_MONOTONIC = "node-monotonic"
COMMIT_QUORUM = "commit-quorum"
HISTORY_GAP = "history-gap"
INVARIANTS: tuple[str, ...] = (
    ONE_MASTER,
    UNIQUE_STATE,
    COMMITTED_CHAIN,
    APPLIED_COMMITTED,
    NODE_MONOTONIC,
    COMMIT_QUORUM,
    HISTORY_GAP,
)

# The event types and the "no cluster yet" marker come from the history contract the nodes write with.
EVENT_TYPES: tuple[str, ...] = tuple(event_type.value for event_type in EventType)
STATE_TYPES: tuple[str, ...] = tuple(event_type.value for event_type in STATE_EVENT_TYPES)

# Before bootstrap a node does not know its cluster's UUID yet.
UNBOOTSTRAPPED = NO_CLUSTER_UUID

_ids = T.ArrayType(T.StringType(), containsNull=False)

# Only the contract's fields: anything else on a line (e.g. `node_name`) is ignored by the JSON reader.
EVENT_SCHEMA = T.StructType(
    [
        T.StructField("cluster_uuid", T.StringType()),
        T.StructField("node", T.StringType()),
        T.StructField("seq", T.LongType()),
        T.StructField("ts", T.DoubleType()),
        T.StructField("type", T.StringType()),
        T.StructField("term", T.LongType()),
        T.StructField("version", T.LongType()),
        T.StructField("state_uuid", T.StringType()),
        T.StructField("parent_uuid", T.StringType()),
        T.StructField("master", T.StringType()),
        T.StructField("last_committed_config", _ids),
        T.StructField("last_accepted_config", _ids),
        T.StructField("quorum", _ids),
    ]
)
EVENT_COLUMNS: tuple[str, ...] = tuple(f.name for f in EVENT_SCHEMA.fields)

# Fields every event must carry (non-null); state events also need their state's identity.
REQUIRED_ALWAYS: tuple[str, ...] = ("cluster_uuid", "node", "seq", "type", "term")
REQUIRED_FOR_STATES: tuple[str, ...] = ("version", "state_uuid")

# The fields an example event shows in the report, so that a person can find it.
EXAMPLE_FIELDS: tuple[str, ...] = ("node", "seq", "type", "term", "version", "state_uuid")
