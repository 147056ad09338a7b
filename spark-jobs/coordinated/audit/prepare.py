"""The frames every check shares, built with as few passes over the events as possible.

1. One small aggregate per node (`node_rows`): which cluster the node belongs to (see `with_cluster`)
   and the per-node figures of the report.
2. One aggregation of the state and `elected` events (`table`), kept in memory: one row per distinct
   state with what happened to it, plus one row per term with who was elected. `states` and `terms`
   are views of it; most checks and statistics read only these (about a fifteenth of the events).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from coordinated.audit.schema import EVENT_COLUMNS, STATE_TYPES, UNBOOTSTRAPPED

NO_MASTER = "<none>"  # a state that names no master


@dataclass
class Frames:
    spark: SparkSession
    events: DataFrame  # EVENT_COLUMNS + `cid`
    node_rows: list[Row]  # per node: cluster, events, first/last seq and ts, elections, applied
    table: DataFrame  # see `state_and_term_table`
    max_examples: int = 5
    max_violations: int = 20
    excused: tuple[tuple[str, int], ...] = ()  # (node, seq) that a truncated last line explains

    @property
    def states(self) -> DataFrame:
        """One row per (cid, term, version, state_uuid)."""
        return self.table.filter(F.col("state_uuid").isNotNull())

    @property
    def terms(self) -> DataFrame:
        """One row per (cid, term): the elected nodes, when, and the masters the term's states name."""
        t = self.table
        named = F.array_compact(
            F.array(
                F.col("master_min"),
                F.col("master_max"),
                F.when(F.col("master_missing"), F.lit(NO_MASTER)),
            )
        )
        return t.groupBy("cid", "term").agg(
            F.array_sort(F.array_distinct(F.flatten(F.collect_list("winners")))).alias("winners"),
            F.min("elected_ts").alias("elected_ts"),
            F.array_sort(
                F.array_distinct(F.flatten(F.collect_list(F.when(F.col("state_uuid").isNotNull(), named))))
            ).alias("named"),
        )

    def release(self) -> None:
        self.table.unpersist()


def node_summary(events: DataFrame) -> list[Row]:
    """Per node: its cluster (first UUID it named other than "_na_") and the report's figures."""
    named = F.col("cluster_uuid") != UNBOOTSTRAPPED
    return (
        events.groupBy("node")
        .agg(
            F.min_by(F.when(named, F.col("cluster_uuid")), F.when(named, F.col("seq"))).alias("cluster"),
            F.count(F.lit(1)).alias("events"),
            F.min("seq").alias("first_seq"),
            F.max("seq").alias("last_seq"),
            F.min("ts").alias("first_ts"),
            F.max("ts").alias("last_ts"),
            F.sum((F.col("type") == "elected").cast("long")).alias("elections"),
            F.sum((F.col("type") == "applied").cast("long")).alias("applied"),
        )
        .orderBy("node")
        .collect()
    )


def with_cluster(events: DataFrame, node_rows: list[Row] | None = None) -> DataFrame:
    """Add `cid`, the cluster an event belongs to.

    A node writes "_na_" until it learns the cluster UUID at bootstrap; those early events (its first
    terms, even its `elected` for term 1) belong to the first cluster the node later names. A node that
    never learned one stays in "_na_".
    """
    rows = node_summary(events) if node_rows is None else node_rows
    schema = T.StructType([T.StructField("node", T.StringType()), T.StructField("_node_cluster", T.StringType())])
    known = events.sparkSession.createDataFrame([(r["node"], r["cluster"]) for r in rows], schema)
    return (
        events.select(*EVENT_COLUMNS)
        .join(F.broadcast(known), "node", "left")
        .withColumn(
            "cid",
            F.when(
                F.col("cluster_uuid") == UNBOOTSTRAPPED, F.coalesce("_node_cluster", F.lit(UNBOOTSTRAPPED))
            ).otherwise(F.col("cluster_uuid")),
        )
        .drop("_node_cluster")
    )


def majority_of(config: str) -> Column:
    """Whether the event's `quorum` is more than half of the configuration `config` (joint consensus
    checks both). An empty or missing configuration has no majority at all."""
    cfg = F.array_distinct(F.coalesce(F.col(config), F.array()))
    acked = F.size(F.array_intersect(F.array_distinct("quorum"), cfg))
    return acked * 2 > F.size(cfg)


def state_and_term_table(events: DataFrame) -> DataFrame:
    """State events grouped per state, and `elected` events per term (with null version/state_uuid)."""
    typ = F.col("type")
    is_state = typ.isin(*STATE_TYPES)
    elected = typ == "elected"
    master_commit = (typ == "committed") & F.col("quorum").isNotNull()
    return (
        events.filter(is_state | elected)
        .groupBy(
            "cid",
            "term",
            F.when(is_state, F.col("version")).alias("version"),
            F.when(is_state, F.col("state_uuid")).alias("state_uuid"),
        )
        .agg(
            F.max("parent_uuid").alias("parent_uuid"),
            F.max(typ == "committed").alias("committed"),
            F.max(typ == "applied").alias("applied"),
            F.min("master").alias("master_min"),
            F.max("master").alias("master_max"),
            F.max(is_state & F.col("master").isNull()).alias("master_missing"),
            F.min(F.when(typ == "accepted", F.col("ts"))).alias("first_accepted_ts"),
            # The master's own `committed` carries the quorum: the moment the commit was decided.
            F.min(F.when(master_commit, F.col("ts"))).alias("commit_ts"),
            F.max(master_commit & ~(majority_of("last_committed_config") & majority_of("last_accepted_config"))).alias(
                "bad_quorum"
            ),
            F.array_sort(F.collect_set(F.when(elected, F.col("node")))).alias("winners"),
            F.min(F.when(elected, F.col("ts"))).alias("elected_ts"),
        )
        .withColumn("master", F.col("master_max"))
    )


def prepare(
    spark: SparkSession,
    events: DataFrame,
    *,
    max_examples: int = 5,
    max_violations: int = 20,
    excused: tuple[tuple[str, int], ...] = (),
) -> Frames:
    rows = node_summary(events)
    ev = with_cluster(events, rows)
    table = state_and_term_table(ev).persist(StorageLevel.MEMORY_AND_DISK)
    return Frames(spark, ev, rows, table, max_examples, max_violations, excused)
