"""The history schema as an explicit Spark schema, and the names the report uses.

`EVENT_SCHEMA` is derived from the nodes' own history event (`coordinated.coordination.history`), so the
audit reads exactly what the sidecar and the simulator write; everything else here derives from it.
"""

from __future__ import annotations

from typing import get_args, get_origin

import msgspec
from pyspark.sql import types as T

from coordinated.coordination.history import (
    INFORMATIONAL_FIELDS,
    NO_CLUSTER_UUID,
    RESET_EVENT_TYPES,
    SHELL_FIELDS,
    STATE_EVENT_TYPES,
    EventType,
    HistoryEvent,
)

# Report names (a contract: docs/audit.md). The order is the order of the report.
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

# The event types and the "no cluster yet" marker come from the history contract the nodes write with.
EVENT_TYPES: tuple[str, ...] = tuple(event_type.value for event_type in EventType)
STATE_TYPES: tuple[str, ...] = tuple(event_type.value for event_type in STATE_EVENT_TYPES)
RESET_TYPES: tuple[str, ...] = tuple(event_type.value for event_type in RESET_EVENT_TYPES)
UNSAFE_BOOTSTRAP: str = EventType.UNSAFE_BOOTSTRAP.value
SETTINGS_REMOVED: str = EventType.SETTINGS_REMOVED.value

# Before bootstrap a node does not know its cluster's UUID yet.
UNBOOTSTRAPPED = NO_CLUSTER_UUID


def _spark_type(annotation: object) -> T.DataType:
    """The Spark type of one HistoryEvent field: strings (and the event type), integers, node-id lists."""
    for python_type, spark_type in ((float, T.DoubleType()), (int, T.LongType())):
        if annotation is python_type or python_type in get_args(annotation):
            return spark_type
    if tuple in (get_origin(annotation), *map(get_origin, get_args(annotation))):
        return T.ArrayType(T.StringType(), containsNull=False)
    return T.StringType()


def _event_schema() -> T.StructType:
    """The contract's fields of `HistoryEvent`, with the shell's `seq` and `ts` after `node`."""
    fields: list[T.StructField] = []
    for field in msgspec.structs.fields(HistoryEvent):
        if field.name not in INFORMATIONAL_FIELDS:
            fields.append(T.StructField(field.name, _spark_type(field.type)))
        if field.name == "node":
            fields.extend(T.StructField(name, _spark_type(kind)) for name, kind in SHELL_FIELDS)
    return T.StructType(fields)


# Only the contract's fields: anything else on a line (e.g. `node_name`) is ignored by the JSON reader.
EVENT_SCHEMA = _event_schema()
EVENT_COLUMNS: tuple[str, ...] = tuple(f.name for f in EVENT_SCHEMA.fields)

# The node's name (a pod name on Kubernetes) as events carry it: informational, so it is read into a column of
# its own (null where absent, e.g. from Parquet) and used only to name nodes in the report.
NODE_NAME = "node_name"
NODE_NAME_COLUMN = "_node_name"

# Fields every event must carry (non-null); state events also need their state's identity.
REQUIRED_ALWAYS: tuple[str, ...] = ("cluster_uuid", "node", "seq", "type", "term")
REQUIRED_FOR_STATES: tuple[str, ...] = ("version", "state_uuid")

# An example event in the report shows every field of the event, plus `file` (and `line` where known).
EXAMPLE_FIELDS: tuple[str, ...] = EVENT_COLUMNS
