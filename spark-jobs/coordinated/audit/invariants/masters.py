"""one-master-per-term: at most one node is elected per term, and every state of term t names it.

The `elected` events come from the window pass (a few per term); the masters the states name come from the
state table as hashes, compared with the winner's hash. Flagged terms are described with the strings.
"""

from __future__ import annotations

from collections import defaultdict

from pyspark.sql import functions as F
from pyspark.sql import types as T

from coordinated.audit.prepare import NO_MASTER, Frames
from coordinated.audit.schema import ONE_MASTER, STATE_TYPES
from coordinated.audit.violations import CheckResult, Violation, examples_for, first_rows, lookup_events


def winners(fr: Frames) -> dict[tuple[str, int], list[tuple[str, float | None, str, int]]]:
    """(cluster, term) -> [(node, ts, cluster_uuid as written, seq)] of its `elected` events."""
    out: dict[tuple[str, int], list[tuple[str, float | None, str, int]]] = defaultdict(list)
    for r in fr.nodes.elections:
        cid = fr.nodes.home_of(r["cluster_uuid"], r["node"], r["_na_origin"])
        out[(cid, r["term"])].append((r["node"], r["ts"], r["cluster_uuid"], r["seq"]))
    return out


def check(fr: Frames) -> list[CheckResult]:
    won = winners(fr)
    twice = sorted((k, v) for k, v in won.items() if len({n for n, *_ in v}) > 1)
    single = [(cid, term, v[0][0]) for (cid, term), v in won.items() if len({n for n, *_ in v}) == 1]
    schema = T.StructType(
        [
            T.StructField("cid", T.StringType()),
            T.StructField("term", T.LongType()),
            T.StructField("winner", T.StringType()),
        ]
    )
    winner_df = fr.spark.createDataFrame(single, schema).withColumn("wh", F.xxhash64("winner"))
    per_term = fr.states.groupBy("cid", "term").agg(
        F.min("master_min_h").alias("lo"), F.max("master_max_h").alias("hi"), F.max("master_missing").alias("missing")
    )
    named = (
        per_term.join(F.broadcast(winner_df), ["cid", "term"], "left")
        .withColumn(
            "kind",
            F.when(
                F.col("winner").isNotNull()
                & ((F.col("lo") != F.col("wh")) | (F.col("hi") != F.col("wh")) | F.col("missing")),
                F.lit("named"),
            ).when(
                F.col("winner").isNull()
                & ((F.col("lo") != F.col("hi")) | (F.col("missing") & F.col("lo").isNotNull())),
                F.lit("disagree"),
            ),
        )
        .filter(F.col("kind").isNotNull())
        .select(F.col("cid").alias("cluster_uuid"), "term", "winner", "kind")
    )
    total_named, rows = first_rows(named, ["cluster_uuid", "term"], fr.max_violations)
    violations = []
    refs = {(v[2], v[0], v[3]) for _, vs in twice[: fr.max_violations] for v in vs}
    found = lookup_events(fr.events, refs)
    for (cid, term), vs in twice[: fr.max_violations]:
        nodes = sorted({n for n, *_ in vs})
        examples = [e for v in sorted(vs) for e in found.get((v[2], v[0], v[3]), [])][: fr.max_examples]
        violations.append(
            Violation(
                ONE_MASTER,
                f"cluster {cid}: term {term}: {len(nodes)} nodes were elected ({', '.join(nodes)})",
                examples,
            )
        )
    states = fr.events.filter(F.col("type").isin(*STATE_TYPES)).withColumn("_m", F.coalesce("master", F.lit(NO_MASTER)))
    ex = examples_for(
        states,
        rows,
        ["cluster_uuid", "term"],
        fr.max_examples,
        where=F.col("winner").isNull() | (F.col("_m") != F.col("winner")),
        spread=["_m"],
        carry=["winner"],
    )
    for r in rows[: max(0, fr.max_violations - len(violations))]:
        examples = ex.get((r["cluster_uuid"], r["term"]), [])
        masters = sorted({str(e["master"] or NO_MASTER) for e in examples})
        if r["kind"] == "named":
            detail = f"term {r['term']}: {r['winner']} was elected, but states of the term name {', '.join(masters)} as master"
        else:
            detail = f"term {r['term']}: states name different masters ({', '.join(masters)})"
        violations.append(Violation(ONE_MASTER, f"cluster {r['cluster_uuid']}: {detail}", examples))
    return [CheckResult(ONE_MASTER, len(twice) + total_named, violations)]
