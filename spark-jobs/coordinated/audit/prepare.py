"""The frames every check shares, built with as few passes over the events as possible.

0. The state table's pass also checks the input for malformed rows and scouts it (the time range, the reset
   events, the node names), where the reader has not done that already (Parquet: `DataFrame.observe`).
1. One window over each node's events in seq order (`streams.py`): the per-node invariants, the per-node
   figures and the few `elected`/`stepped_down` events; only flagged rows and one row per node reach the
   driver, where the per-node histories are put together (`streams.stitch`).
2. One hash aggregation of the state events (`state_table`), kept in memory: one row per
   (cluster, state_uuid) with numeric buffers only (64-bit hashes of the strings, bit masks, counts). Most
   checks read only this table (about a fifteenth of the events); a check that flags a state verifies it
   with the strings before it reports it.

Nodes are keyed by (cluster, node): node ids of different clusters may collide. A node writes "_na_" as its
cluster until bootstrap; those events are keyed by the folder they came from as well and are attached to
the cluster the same node's history continues in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from coordinated.audit.horizon import Horizon, cut_events
from coordinated.audit.reading import CARRIED, SCOUTED_OK, Scout, Scouting, folder_of, scout
from coordinated.audit.schema import SETTINGS_REMOVED, UNBOOTSTRAPPED, UNSAFE_BOOTSTRAP
from coordinated.audit.streams import CHUNK, NodePass, node_pass

NO_MASTER = "<none>"  # a state that names no master
LAG_BINS = 120
MAX_FLAGGED = 1000
WINDOW_ROWS_PER_TASK = 250_000
# Seqs per range of a node's history in the window (a Spark setting, e.g. `--conf`, so tests can make it tiny).
CHUNK_SETTING = "coordinated.audit.windowChunk"


def _holds(r: Row, condition: str) -> bool:
    if condition == "content":
        return bool(r["conflict"])
    if condition == "applied":
        return bool(r["applied"] and not r["committed"])
    return bool(r["committed"])  # "quorum": the candidates are among the committed flagged states


MAX_BITS = 63  # configuration members beyond this many are checked with the strings


@dataclass
class Frames:
    spark: SparkSession
    events: DataFrame  # EVENT_COLUMNS + `_source`, `_origin`
    nodes: NodePass
    table: DataFrame  # see `state_table`
    max_examples: int = 5
    max_violations: int = 20
    persisted: list[DataFrame] = field(default_factory=list)
    t0: float = 0.0
    lag_width: float = 1.0
    flagged: list[Row] = field(default_factory=list)  # up to MAX_FLAGGED `suspect` states
    scout: Scout | None = None  # what the input's first pass found out (time range, resets, node names)
    horizon: Horizon = field(default_factory=Horizon)  # where histories start on purpose (`horizon`)
    cut_notes: list[dict[str, object]] = field(default_factory=list)  # the input's crash-cut last lines (`holes`)

    def flags(self, condition: str) -> bool:
        """Whether a check has anything to look at: any flagged state meets `condition` (a column name or
        a small predicate over the Row), or the flagged list was cut short."""
        if len(self.flagged) >= MAX_FLAGGED:
            return True
        return any(_holds(r, condition) for r in self.flagged)

    @property
    def states(self) -> DataFrame:
        return self.table

    _per_term: list[Row] | None = None

    def per_term(self) -> list[Row]:
        """Per (cid, term): the masters its states name (as hashes) and its master's commits (one small job)."""
        if self._per_term is None:
            self._per_term = (
                self.table.groupBy("cid", "term")
                .agg(
                    F.min("master_min_h").alias("lo"),
                    F.max("master_max_h").alias("hi"),
                    F.max("master_missing").alias("missing"),
                    F.max("fresh").alias("fresh"),
                    F.min("commit_ts").alias("first"),
                    F.max("commit_ts").alias("last"),
                    F.count("commit_ts").alias("commits"),
                )
                .collect()
            )
        return self._per_term

    def release(self) -> None:
        for df in [self.table, *self.persisted]:
            df.unpersist()


def majority_of(config: str, quorum: Column | None = None) -> Column:
    """Whether `quorum` (default: the event's) is more than half of the configuration `config` (joint
    consensus checks both). An empty or missing configuration, or a missing quorum, has no majority."""
    q = F.col("quorum") if quorum is None else quorum
    cfg = F.array_distinct(F.coalesce(F.col(config), F.array()))
    acked = F.size(F.array_intersect(F.array_distinct(q), cfg))
    return F.coalesce(acked * 2 > F.size(cfg), F.lit(False))


def config_members() -> Column:
    """Both configurations of the event's state, in the order the event lists them: a member's position is its
    bit in the masks. Events whose configurations differ (even in order only) have different `cfg` hashes, so
    a state whose masks are compared at all has one order on all its events; the others are checked exactly."""
    return F.array_union(F.coalesce("last_committed_config", F.array()), F.coalesce("last_accepted_config", F.array()))


def _bit(position: Column) -> Column:
    return F.when((position > 0) & (position <= MAX_BITS), F.pow(F.lit(2.0), position - 1).cast("long")).otherwise(
        F.lit(0).cast("long")
    )


def is_master_commit() -> Column:
    """The master's own `committed` event: the node that commits is the state's master."""
    return (F.col("type") == "committed") & (F.col("node") == F.col("master"))


def hash_of(col: str) -> Column:
    return F.when(F.col(col).isNotNull(), F.xxhash64(col))


def state_table(events: DataFrame, scouting: Scouting | None = None) -> DataFrame:
    """One row per (cid, state_uuid) of what happened to the state, in numeric buffers only.

    An `unsafe_bootstrap` event counts as its state's commit (`committed`, `reset_root`): the operator decided
    it offline, so it is the new cluster's first committed state, the root of its committed chain, and has no
    quorum to check. A `settings_removed` event is a node's copy of its last-accepted state rewritten offline
    (`rewritten`): the same term and version under a new uuid, whose parent is the copy it replaced; it is not
    committed, so a committed chain runs through it to that copy, and it is no second state of its version.

    `conflict`: events of one state_uuid disagree on a field that defines the state (term, version, parent,
    master, configurations; see `pre` for the last-committed configuration). The quorum check works on masks:
    bit i stands for the i-th member of the state's configurations. `acc_mask` has the members that accepted
    it, `quorum_mask` those the master counted; any quorum member outside the configurations, or a state
    whose configurations are too large for a mask, is marked for the exact check (`quorum_odd`).

    With `scouting`, the pass reads the input's rows (malformed ones too) and scouts them on the way: the
    scout's inputs are computed in the same projection as the state columns, observed, and only then are the
    state events kept.
    """
    typ = F.col("type")
    acc = typ == "accepted"
    commit = is_master_commit()
    reset = typ == UNSAFE_BOOTSTRAP
    rewritten = typ == SETTINGS_REMOVED
    quorum = F.coalesce("quorum", F.array())
    configs = F.xxhash64("last_committed_config", "last_accepted_config")
    pre = acc | ~F.col("last_committed_config").eqNullSafe(F.col("last_accepted_config"))
    # The members once per event that needs them (accepted and the master's commit), not once per use.
    kept = typ.isin("accepted", "committed", "applied", UNSAFE_BOOTSTRAP, SETTINGS_REMOVED)
    source = events.filter(kept) if scouting is None else scouting.rows
    carried = F.col(CARRIED) if CARRIED in source.columns else F.lit(False)
    ev = source.withColumn("_members", F.when(acc | commit, config_members()))
    members = F.col("_members")
    ev = ev.select(
        F.col("cluster_uuid").alias("cid"),
        "state_uuid",
        "term",
        "version",
        "ts",
        acc.alias("acc"),
        commit.alias("mcommit"),
        reset.alias("reset"),
        rewritten.alias("rewritten"),
        (typ == "applied").alias("app"),
        (typ == "committed").alias("comm"),
        (~carried).alias("new"),
        F.xxhash64("term", "version", "parent_uuid", "master", "last_accepted_config").alias("content"),
        # A commit makes the state's last-committed configuration its last-accepted one, so `committed` and
        # `applied` events may carry either form; only the accepted form is compared (`cfg_pre`, below).
        pre.alias("pre"),
        hash_of("parent_uuid").alias("parent_h"),
        hash_of("master").alias("master_h"),
        # Hashed only where a buffer reads it: most events are applies and followers' commits in the accepted form.
        F.when(pre | commit, configs).alias("cfg"),
        F.when(acc, _bit(F.array_position(members, F.col("node")))).alias("acc_bit"),
        F.when(
            commit,
            F.aggregate(quorum, F.lit(0).cast("long"), lambda m, x: m.bitwiseOR(_bit(F.array_position(members, x)))),
        ).alias("q_mask"),
        F.when(
            commit,
            (F.size(members) > MAX_BITS) | F.exists(quorum, lambda x: F.array_position(members, x) == 0),
        ).alias("q_odd"),
        F.when(commit, majority_of("last_committed_config") & majority_of("last_accepted_config")).alias("q_ok"),
        *(scouting.columns if scouting is not None else []),
    )
    if scouting is not None:
        ev = scouting.watch(ev).filter(
            F.col(SCOUTED_OK) & (F.col("acc") | F.col("comm") | F.col("app") | F.col("reset") | F.col("rewritten"))
        )
    cfg_pre = F.when(F.col("pre"), F.col("cfg"))
    return ev.groupBy("cid", "state_uuid").agg(
        F.min("term").alias("term"),
        F.min("version").alias("version"),
        ((F.min("content") != F.max("content")) | (F.min(cfg_pre) != F.max(cfg_pre))).alias("conflict"),
        # The master's commit says which parent the committed state has; conflicting copies are flagged apart.
        F.coalesce(F.min(F.when(F.col("mcommit"), F.col("parent_h"))), F.min("parent_h")).alias("parent_h"),
        F.min("master_h").alias("master_min_h"),
        F.max("master_h").alias("master_max_h"),
        F.max(F.col("master_h").isNull()).alias("master_missing"),
        F.sum(F.col("acc").cast("int")).alias("accepted"),
        F.min(F.when(F.col("acc"), F.col("cfg"))).alias("acc_cfg_min"),
        F.max(F.when(F.col("acc"), F.col("cfg"))).alias("acc_cfg_max"),
        F.min(F.when(F.col("mcommit"), F.col("cfg"))).alias("commit_cfg"),
        (F.max("mcommit") | F.max("reset")).alias("committed"),
        (F.max("reset") & ~F.max("mcommit")).alias("reset_root"),
        F.max("rewritten").alias("rewritten"),
        F.max("comm").alias("committed_anywhere"),
        F.max("app").alias("applied"),
        F.bit_or("acc_bit").alias("acc_mask"),
        F.bit_or("q_mask").alias("quorum_mask"),
        F.max("q_odd").alias("quorum_odd"),
        F.min("q_ok").alias("quorum_ok"),
        F.min(F.when(F.col("acc"), F.col("ts"))).alias("first_accepted_ts"),
        F.min(F.when(F.col("mcommit"), F.col("ts"))).alias("commit_ts"),
        # An incremental audit judges a state only where one of its events is new (see `checkpoint`).
        F.max("new").alias("fresh"),
        F.max(F.col("new") & (F.col("mcommit") | F.col("reset"))).alias("fresh_commit"),
        F.max(F.col("new") & F.col("app")).alias("fresh_applied"),
    )


def prepare(
    spark: SparkSession,
    events: DataFrame,
    *,
    max_examples: int = 5,
    max_violations: int = 20,
    scouted: Scout | None = None,
    scouting: Scouting | None = None,
    settle: Callable[[], Scout] | None = None,
    folder: Callable[[str], str] = folder_of,
    seed: Callable[[Horizon], None] | None = None,
) -> Frames:
    """The state table first: its pass also yields the scout, which the window pass needs, where the reader
    left the input's checks to the first pass (`scouting`)."""
    table = state_table(events, scouting).withColumn("state_h", F.xxhash64("state_uuid"))
    table = table.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        # The first job over the table builds it.
        flagged = table.filter(suspect()).limit(MAX_FLAGGED).collect()
        found = scouted or (settle() if settle is not None else None) or scout(events)
    except BaseException:
        table.unpersist()
        raise
    t0 = float(found.first_ts or 0.0)
    t1 = float(found.last_ts or t0)
    chunk = int(spark.conf.get(CHUNK_SETTING, str(CHUNK)) or CHUNK)
    width = max((t1 - t0) / LAG_BINS, 1e-6)
    # Enough window tasks that each sorts its rows in memory: at 10M events, 8 tasks of 1.25M wide rows spilled.
    setting = "spark.sql.shuffle.partitions"
    configured = spark.conf.get(setting)
    tasks = -(-found.events // WINDOW_ROWS_PER_TASK)
    if configured is not None and tasks > int(configured):
        spark.conf.set(setting, str(tasks))
    try:
        horizon = Horizon.of(cut_events(events, found))
        if seed is not None:  # an incremental audit's checkpoint
            seed(horizon)
        nodes = node_pass(events, t0, width, LAG_BINS, resets=found.resets, chunk=chunk, folder=folder, horizon=horizon)
    finally:
        if configured is not None:
            spark.conf.set(setting, configured)
    fr = Frames(
        spark,
        events,
        nodes,
        table,
        max_examples,
        max_violations,
        t0=t0,
        lag_width=(t1 - t0) / LAG_BINS,
        scout=found,
        horizon=horizon,
    )
    fr.flagged = flagged
    return fr


def quorum_candidates() -> Column:
    """Committed states whose quorum the table cannot clear: commit-quorum checks them with the strings."""
    return (
        F.col("committed")
        & F.col("fresh_commit")
        & ~F.col("reset_root")  # a state the node tool committed offline has no quorum to check
        & (
            (F.col("accepted") == 0)
            | ~F.coalesce(F.col("quorum_ok"), F.lit(False))
            | (F.col("acc_cfg_min") != F.col("acc_cfg_max"))
            | ~F.col("acc_cfg_min").eqNullSafe(F.col("commit_cfg"))
            | ((F.col("quorum_mask").bitwiseAND(F.bitwise_not(F.coalesce("acc_mask", F.lit(0).cast("long"))))) != 0)
            | F.coalesce(F.col("quorum_odd"), F.lit(False))
        )
    )


def suspect() -> Column:
    """States some check must look at: in a valid history none, so one small job clears them all."""
    return (
        (F.col("conflict") & F.col("fresh"))
        | (F.col("applied") & ~F.col("committed") & F.col("fresh_applied"))
        | quorum_candidates()
    )


__all__ = ["NO_MASTER", "UNBOOTSTRAPPED", "Frames", "majority_of", "prepare", "state_table"]
