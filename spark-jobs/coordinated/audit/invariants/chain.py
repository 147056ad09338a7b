"""committed-chain: ordered by version, committed versions strictly increase, terms never decrease, and each
committed state descends, through parent links, from the previous committed state.

A state counts as committed when its master recorded its `committed` event. Between two committed states
there may be uncommitted ones: a new master re-publishes its last-accepted state (perhaps never committed)
under its own term. Every committed state's walk up the parent links stops at the first committed ancestor,
which must be the previous committed state. Uncommitted states are few (failed publications), so the walk's
end for each of them is found on the driver in one pass and joined back; past `DRIVER_WALK_LIMIT` of them the
walk runs in Spark by pointer jumping (each round doubles the distance covered). States are matched by
64-bit hashes of their uuids; the strings are looked up only to describe a violation.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from coordinated.audit.prepare import Frames
from coordinated.audit.schema import COMMITTED_CHAIN, STATE_TYPES
from coordinated.audit.violations import CheckResult, Violation, examples_for, first_rows, local_frame

MAX_ROUNDS = 40  # 2**40 uncommitted states in a row is beyond any real history: a cycle
DRIVER_WALK_LIMIT = 2_000_000

ENDS_SCHEMA = T.StructType(
    [
        T.StructField("cid", T.StringType()),
        T.StructField("parent_h", T.LongType()),
        T.StructField("end", T.LongType()),
        T.StructField("done", T.BooleanType()),
    ]
)


def walk_on_driver(rows: list[tuple[str, int, int | None]]) -> list[tuple[str, int, int | None, bool]]:
    """(cid, state, parent) of the uncommitted states -> (cid, state, end, done): where following parents
    first leaves them (a committed state, an unknown uuid, or None at a root); done is False for a cycle."""
    parent = {(c, s): p for c, s, p in rows}
    ends: dict[tuple[str, int], tuple[int | None, bool]] = {}
    for key in parent:
        path, cur, done = [], key, True
        seen: set[tuple[str, int]] = set()
        while cur in parent and cur not in ends:
            if cur in seen:
                done = False
                break
            seen.add(cur)
            path.append(cur)
            nxt = parent[cur]
            if nxt is None:
                cur = None  # type: ignore[assignment]
                break
            cur = (key[0], nxt)
        if cur is not None and cur in ends:
            end = ends[cur]
        elif not done:
            end = (None, False)
        else:
            end = (cur[1] if cur is not None else None, True)
        for k in path:
            ends[k] = end
    return [(c, s, e, d) for (c, s), (e, d) in ends.items()]


def walk_in_spark(graph: DataFrame, max_rounds: int = MAX_ROUNDS) -> DataFrame:
    """The same by pointer jumping over (cid, state_h, parent_h, committed)."""
    u = graph.filter(~F.col("committed")).select("cid", "state_h", F.col("parent_h").alias("nxt"))
    ids = u.select("cid", F.col("state_h").alias("nxt"), F.lit(False).alias("done"))
    jumps = (
        u.join(ids, ["cid", "nxt"], "left")
        .select("cid", "state_h", "nxt", F.coalesce("done", F.lit(True)).alias("done"))
        .localCheckpoint()
    )
    for _ in range(max_rounds):
        if jumps.filter(~F.col("done")).isEmpty():
            break
        a, b = jumps.alias("a"), jumps.alias("b")
        jumps = (
            a.join(b, (F.col("a.cid") == F.col("b.cid")) & (F.col("a.nxt") == F.col("b.state_h")), "left")
            .select(
                F.col("a.cid").alias("cid"),
                F.col("a.state_h").alias("state_h"),
                F.when(F.col("a.done"), F.col("a.nxt")).otherwise(F.col("b.nxt")).alias("nxt"),
                (F.col("a.done") | F.coalesce(F.col("b.done"), F.lit(True))).alias("done"),
            )
            .localCheckpoint()
        )
    return jumps.select("cid", F.col("state_h").alias("parent_h"), F.col("nxt").alias("end"), "done")


def walk_ends(fr: Frames) -> DataFrame:
    uncommitted = fr.states.filter(~F.col("committed")).select("cid", "state_h", "parent_h")
    rows = uncommitted.limit(DRIVER_WALK_LIMIT + 1).collect()
    if len(rows) <= DRIVER_WALK_LIMIT:
        ends = walk_on_driver([(r["cid"], r["state_h"], r["parent_h"]) for r in rows])
        return local_frame(fr.spark, ends, ENDS_SCHEMA)
    return walk_in_spark(fr.states.select("cid", "state_h", "parent_h", "committed"))


def check(fr: Frames) -> list[CheckResult]:
    st = fr.states
    ends = walk_ends(fr)
    by_version = Window.partitionBy("cid").orderBy("version", "term", "state_uuid")
    committed = (
        st.filter("committed")
        .select("cid", "term", "version", "state_uuid", "state_h", "parent_h", "fresh_commit")
        .withColumn("prev", F.lag(F.struct("term", "version", "state_uuid", "state_h")).over(by_version))
        .filter(F.col("prev").isNotNull() & F.col("fresh_commit"))
        # Up to the horizon, committed states between two others may be gone with trimmed histories.
        .filter(fr.horizon.beyond("cid", "prev.term", "prev.version"))
    )
    walked = committed.join(F.broadcast(ends), ["cid", "parent_h"], "left").select(
        "*",
        # Not an uncommitted state: the walk ends right at the parent.
        F.when(F.col("done").isNull(), F.col("parent_h")).otherwise(F.col("end")).alias("reached"),
    )
    kind = (
        F.when(F.col("version") == F.col("prev.version"), F.lit("version"))
        .when(F.col("term") < F.col("prev.term"), F.lit("term"))
        .when(F.col("done") == F.lit(False), F.lit("cycle"))
        .when(~F.col("reached").eqNullSafe(F.col("prev.state_h")), F.lit("descent"))
    )
    bad = walked.withColumn("kind", kind).filter(F.col("kind").isNotNull())
    total, rows = first_rows(bad, ["cid", "version", "term"], fr.max_violations)
    reached = [r["reached"] for r in rows if r["kind"] == "descent" and r["reached"] is not None]
    known = (
        {
            r["state_h"]: r
            for r in st.filter(F.col("state_h").isin(reached))
            .select("state_h", "state_uuid", "version", "committed")
            .collect()
        }
        if reached
        else {}
    )
    unknown = [h for h in reached if h not in known]
    names = (
        {
            r["h"]: r["parent_uuid"]
            for r in fr.events.filter(F.col("parent_uuid").isNotNull())
            .select("parent_uuid", F.xxhash64("parent_uuid").alias("h"))
            .filter(F.col("h").isin(unknown))
            .limit(len(unknown) * 4)
            .collect()
        }
        if unknown
        else {}
    )
    keys = [{"cluster_uuid": r["cid"], "state_uuid": r["state_uuid"]} for r in rows]
    keys += [{"cluster_uuid": r["cid"], "state_uuid": r["prev"]["state_uuid"]} for r in rows]
    ex = examples_for(
        fr.events,
        keys,
        ["cluster_uuid", "state_uuid"],
        1,
        where=F.col("type").isin(*STATE_TYPES),
        order=[F.col("type") != "committed", F.col("node") != F.col("master"), "seq", "node"],
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
            name = names.get(r["reached"], f"#{r['reached']:x}")
            detail = f"{this} descends from {name}, a state no node recorded, not from {prev}"
        else:
            k = known[r["reached"]]
            detail = (
                f"{this} descends from committed state {k['state_uuid']} (version {k['version']}), "
                f"not from {prev}: the committed history forks"
            )
        examples = ex.get((r["cid"], r["state_uuid"]), []) + ex.get((r["cid"], p["state_uuid"]), [])
        violations.append(Violation(COMMITTED_CHAIN, f"cluster {r['cid']}: {detail}", examples))
    return [CheckResult(COMMITTED_CHAIN, total, violations)]
