"""committed-chain: ordered by version, committed versions strictly increase, terms never decrease,
and each committed state descends, through parent links, from the previous committed state.

Between two committed states there may be uncommitted ones: a new master re-publishes its last-accepted
state (perhaps never committed) under its own term. Every committed state's walk up the parent links
stops at the first committed ancestor, which must be the previous committed state. Walks only ever pass
through uncommitted states, so the walk's end is precomputed for those by pointer jumping (each round
doubles the distance covered, a bounded number of self-joins of a small frame) and then looked up with
one join. No per-row Python runs.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from coordinated.audit.prepare import Frames
from coordinated.audit.schema import COMMITTED_CHAIN, STATE_TYPES
from coordinated.audit.violations import CheckResult, Violation, examples_for, first_rows

MAX_ROUNDS = 40  # 2**40 uncommitted states in a row is beyond any real history: a cycle


def walk_ends(graph: DataFrame, max_rounds: int = MAX_ROUNDS) -> DataFrame:
    """For each uncommitted state: where following parents first leaves the uncommitted states.

    `graph` has (cid, state_uuid, parent_uuid, committed). The result has (cid, state_uuid, end, done):
    `end` is a committed state, an unknown uuid, or null at a root; `done` is false for cycles.
    """
    u = graph.filter(~F.col("committed")).select("cid", "state_uuid", F.col("parent_uuid").alias("nxt"))
    ids = u.select("cid", F.col("state_uuid").alias("nxt"), F.lit(False).alias("done"))
    jumps = (
        u.join(ids, ["cid", "nxt"], "left")
        .select("cid", "state_uuid", "nxt", F.coalesce("done", F.lit(True)).alias("done"))
        .localCheckpoint()
    )
    for _ in range(max_rounds):
        if jumps.filter(~F.col("done")).isEmpty():
            break
        a, b = jumps.alias("a"), jumps.alias("b")
        jumps = (
            a.join(b, (F.col("a.cid") == F.col("b.cid")) & (F.col("a.nxt") == F.col("b.state_uuid")), "left")
            .select(
                F.col("a.cid").alias("cid"),
                F.col("a.state_uuid").alias("state_uuid"),
                F.when(F.col("a.done"), F.col("a.nxt")).otherwise(F.col("b.nxt")).alias("nxt"),
                (F.col("a.done") | F.coalesce(F.col("b.done"), F.lit(True))).alias("done"),
            )
            .localCheckpoint()  # keeps the plan from growing with every round
        )
    return jumps.withColumnRenamed("nxt", "end")


def check(fr: Frames) -> list[CheckResult]:
    st = fr.states
    graph = st.groupBy("cid", "state_uuid").agg(
        F.max("parent_uuid").alias("parent_uuid"), F.max("committed").alias("committed")
    )
    ends = walk_ends(graph).withColumnRenamed("state_uuid", "parent_uuid")
    by_version = Window.partitionBy("cid").orderBy("version", "term", "state_uuid")
    committed = (
        st.filter("committed")
        .select("cid", "term", "version", "state_uuid", "parent_uuid")
        .withColumn("prev", F.lag(F.struct("term", "version", "state_uuid")).over(by_version))
        .filter(F.col("prev").isNotNull())
    )
    walked = committed.join(F.broadcast(ends), ["cid", "parent_uuid"], "left").select(
        "*",
        # Not an uncommitted state: the walk ends right at the parent.
        F.when(F.col("done").isNull(), F.col("parent_uuid")).otherwise(F.col("end")).alias("reached"),
    )
    kind = (
        F.when(F.col("version") == F.col("prev.version"), F.lit("version"))
        .when(F.col("term") < F.col("prev.term"), F.lit("term"))
        .when(F.col("done") == F.lit(False), F.lit("cycle"))
        .when(~F.col("reached").eqNullSafe(F.col("prev.state_uuid")), F.lit("descent"))
    )
    bad = walked.withColumn("kind", kind).filter(F.col("kind").isNotNull())
    total, rows = first_rows(bad, ["cid", "version", "term"], fr.max_violations)
    reached = [r["reached"] for r in rows if r["kind"] == "descent" and r["reached"] is not None]
    known = (
        {
            r["state_uuid"]: r
            for r in st.filter(F.col("state_uuid").isin(reached)).select("state_uuid", "version", "committed").collect()
        }
        if reached
        else {}
    )
    # Examples: a committed event of the offending state and one of the previous committed state.
    keys = [{"cid": r["cid"], "state_uuid": r["state_uuid"]} for r in rows]
    keys += [{"cid": r["cid"], "state_uuid": r["prev"]["state_uuid"]} for r in rows]
    ex = examples_for(
        fr.events,
        keys,  # type: ignore[arg-type]
        ["cid", "state_uuid"],
        1,
        where=F.col("type").isin(*STATE_TYPES),
        order=[F.col("type") != "committed", "seq", "node"],
    )
    violations = []
    for r in rows:
        p = r["prev"]
        this = f"committed state {r['state_uuid']} (term {r['term']}, version {r['version']})"
        prev = f"the previous committed state {p['state_uuid']} (term {p['term']}, version {p['version']})"
        if r["kind"] == "version":
            detail = f"{this} has the same version as {prev}"
        elif r["kind"] == "term":
            detail = f"{this} has a lower term than {prev}"
        elif r["kind"] == "cycle":
            detail = f"the parent links of {this} run in a cycle"
        elif r["reached"] is None:
            detail = f"the parent links of {this} end at a root without reaching {prev}"
        elif r["reached"] not in known:
            detail = f"{this} descends from {r['reached']}, a state no node recorded, not from {prev}"
        else:
            k = known[r["reached"]]
            detail = (
                f"{this} descends from committed state {r['reached']} (version {k['version']}), "
                f"not from {prev}: the committed history forks"
            )
        examples = ex.get((r["cid"], r["state_uuid"]), []) + ex.get((r["cid"], p["state_uuid"]), [])
        violations.append(Violation(COMMITTED_CHAIN, f"cluster {r['cid']}: {detail}", examples))
    return [CheckResult(COMMITTED_CHAIN, total, violations)]
