"""The archive's frontier: what an audit of a running cluster's archive can judge yet.

The archive holds each node's closed segments, so each node's history is there up to some point, and those
points differ between nodes. A follower's archive can already hold `applied` of a state whose master's
`committed` of it is still in the master's open segment: audited as it is, that would be a false
`applied-only-committed` (or a broken `committed-chain`). The other way round, a master's archive can already
hold `committed` of a state whose followers' `accepted` of it are still in their open segments: a false
`commit-quorum`. So the audit holds back what is not settled yet:

- a state (cluster, version) is unsettled when its master's archived history has not committed that version
  (the master's newest `committed` or `applied` version is lower) and has not gone on to a later term (a master
  in a later term never commits it: a publication it abandoned) nor recorded a graceful `stopped` in that term
  (after a stop a node leads again only in a later term, so it never commits it either: the last publication
  of a cluster whose nodes stopped one by one, which no quorum was left to accept); a master with no history in
  the input at all is a missing history, which the report names instead;
- it is unsettled, too, when a node its master's `committed` counts in the quorum has an archived history that
  stops short of it: no state event of that version or later, and no later term. A history that goes on past
  the version without accepting it is judged (that is a real `commit-quorum` violation);
- a cluster's frontier is one below its lowest unsettled version, and every node's history is cut at its first
  state event above the frontier: a suffix, so that seq stays gapless and per-node checks see a prefix.

What is held back is audited by a later run, once the masters' segments are archived (a stopped node archives
its last segment, `stopped` included, on the way out). Nothing is held back when every master's archive has
caught up, and nothing once every node has stopped gracefully.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from coordinated.audit.schema import STATE_TYPES
from coordinated.coordination.history import EventType

SETTLING_TYPES = ("committed", "applied")  # a node that recorded one of these had committed that version
STOPPED = EventType.STOPPED.value


def hold_back_unsettled(events: DataFrame) -> tuple[DataFrame, dict[str, int]]:
    """(the events up to each cluster's frontier, {cluster: frontier version} for the clusters cut)."""
    states = events.filter(F.col("type").isin(*STATE_TYPES) & F.col("version").isNotNull())
    reached = (
        states.filter(F.col("type").isin(*SETTLING_TYPES))
        .groupBy("cluster_uuid", "node")
        .agg(F.max("version").alias("reached"))
    )
    # The newest term each node's history reached: a master that went on to a later term never commits a state
    # of an earlier one (an abandoned publication, such as a bootstrap that lost the race): that state is settled.
    with_history = events.groupBy("cluster_uuid", "node").agg(F.max("term").alias("newest_term"))
    # A master that stopped gracefully in term t leads again only in a later term: as if it had reached t + 1.
    beyond_stop = F.when(F.col("type") == STOPPED, F.col("term") + 1).otherwise(F.col("term"))
    masters_terms = events.groupBy("cluster_uuid", "node").agg(F.max(beyond_stop).alias("newest_term"))
    masters = (
        states.filter(F.col("master").isNotNull())
        .select("cluster_uuid", "version", "term", F.col("master").alias("node"))
        .distinct()
        .join(masters_terms, ["cluster_uuid", "node"])  # a master without a history is a missing history
        .join(reached, ["cluster_uuid", "node"], "left")
    )
    unsettled = masters.filter(
        (F.col("reached").isNull() | (F.col("reached") < F.col("version"))) & (F.col("newest_term") <= F.col("term"))
    ).select("cluster_uuid", "version")
    seen = states.groupBy("cluster_uuid", "node").agg(F.max("version").alias("seen"))
    voters_behind = (
        states.filter((F.col("type") == "committed") & F.col("quorum").isNotNull())
        .select("cluster_uuid", "version", "term", F.explode("quorum").alias("node"))
        .distinct()
        .join(with_history, ["cluster_uuid", "node"])  # a voter without a history is a missing history
        .join(seen, ["cluster_uuid", "node"], "left")
        .filter((F.col("seen").isNull() | (F.col("seen") < F.col("version"))) & (F.col("newest_term") <= F.col("term")))
        .select("cluster_uuid", "version")
    )
    unsettled = unsettled.unionByName(voters_behind)
    frontiers = {
        row["cluster_uuid"]: int(row["lowest"]) - 1
        for row in unsettled.groupBy("cluster_uuid").agg(F.min("version").alias("lowest")).collect()
    }
    if not frontiers:
        return events, {}
    frontier = F.create_map(*(item for cluster, v in frontiers.items() for item in (F.lit(cluster), F.lit(v))))
    cuts = (
        states.withColumn("frontier", frontier[F.col("cluster_uuid")])
        .filter(F.col("version") > F.col("frontier"))
        .groupBy("cluster_uuid", "node")
        .agg(F.min("seq").alias("_cut_seq"))
    )
    kept = (
        events.join(F.broadcast(cuts), ["cluster_uuid", "node"], "left")
        .filter(F.col("_cut_seq").isNull() | (F.col("seq") < F.col("_cut_seq")))
        .select(*events.columns)
    )
    return kept, frontiers
