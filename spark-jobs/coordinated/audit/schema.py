"""The history schema as an explicit Spark schema, and the names the report uses.

`EVENT_SCHEMA` is the one place the audit defines the event's fields; everything else derives from it.
"""

from __future__ import annotations

from pyspark.sql import types as T

# Report names (DESIGN section 8, contract). The order is the order of the report.
ONE_MASTER = "one-master-per-term"
UNIQUE_STATE = "unique-state-per-version"
COMMITTED_CHAIN = "committed-chain"
APPLIED_COMMITTED = "applied-only-committed"
NODE_MONOTONIC = "node-monotonic"
COMMIT_QUORUM = "commit-quorum"
HISTORY_GAP = "history-gap"
# Added to the contract's list: a node's events never move to another cluster UUID after bootstrap.
NODE_CLUSTER_STABLE = "node-cluster-stable"
INVARIANTS: tuple[str, ...] = (
    ONE_MASTER,
    UNIQUE_STATE,
    COMMITTED_CHAIN,
    APPLIED_COMMITTED,
    NODE_MONOTONIC,
    COMMIT_QUORUM,
    HISTORY_GAP,
    NODE_CLUSTER_STABLE,
)

EVENT_TYPES: tuple[str, ...] = ("term", "elected", "accepted", "committed", "applied", "stepped_down")
STATE_TYPES: tuple[str, ...] = ("accepted", "committed", "applied")

# Before bootstrap a node does not know its cluster's UUID yet.
UNBOOTSTRAPPED = "_na_"

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

# An example event in the report shows every field of the event, plus `file` (and `line` where known).
EXAMPLE_FIELDS: tuple[str, ...] = EVENT_COLUMNS
