"""one-master-per-term: at most one node is elected per term, and every state of term t names it.

The `elected` events come from the window pass (a few per term); the masters the states name come from the
state table as hashes, compared with the winner's hash. Flagged terms are described with the strings.
"""

from __future__ import annotations

from collections import defaultdict

from pyspark.sql import functions as F

from coordinated.audit.prepare import NO_MASTER, Frames
from coordinated.audit.reading import CARRIED
from coordinated.audit.schema import ONE_MASTER, STATE_TYPES
from coordinated.audit.violations import CheckResult, Violation, examples_for, lookup_events


def winners(fr: Frames) -> dict[tuple[str, int], list[tuple[str, float | None, str, int]]]:
    """(cluster, term) -> [(node, ts, cluster_uuid as written, seq)] of its `elected` events."""
    out: dict[tuple[str, int], list[tuple[str, float | None, str, int]]] = defaultdict(list)
    for r in fr.nodes.elections:
        cid = fr.nodes.home_of(r["cluster_uuid"], r["node"], r["_na_origin"])
        out[(cid, r["term"])].append((r["node"], r["ts"], r["cluster_uuid"], r["seq"]))
    return out


def _hashes(fr: Frames, names: list[str]) -> dict[str, int]:
    """Spark's xxhash64 of a few node ids (the state table holds the masters' names as these)."""
    if not names:
        return {}
    # Literals over one row: no Python worker (createDataFrame would start them just for this).
    row = fr.spark.range(1).select(F.array(*[F.xxhash64(F.lit(n)) for n in names]).alias("h")).collect()[0]
    return dict(zip(names, row["h"], strict=True))


def check(fr: Frames) -> list[CheckResult]:
    won = winners(fr)
    fresh_terms = {
        (fr.nodes.home_of(r["cluster_uuid"], r["node"], r["_na_origin"]), r["term"])
        for r in fr.nodes.elections
        if not r[CARRIED]
    }
    twice = sorted((k, v) for k, v in won.items() if len({n for n, *_ in v}) > 1 and k in fresh_terms)
    single = {(cid, term): v[0][0] for (cid, term), v in won.items() if len({n for n, *_ in v}) == 1}
    hashes = _hashes(fr, sorted(set(single.values())))
    flagged = []
    for r in fr.per_term():
        if not r["fresh"] and (r["cid"], r["term"]) not in fresh_terms:
            continue  # judged by the audit that read these events (an incremental audit's carried ones)
        winner = single.get((r["cid"], r["term"]))
        if winner is not None:
            wh = hashes[winner]
            bad = r["lo"] != wh or r["hi"] != wh or r["missing"]
        else:
            bad = r["lo"] != r["hi"] or (r["missing"] and r["lo"] is not None)
        if bad:
            flagged.append((r["cid"], r["term"], winner, "named" if winner is not None else "disagree"))
    flagged.sort(key=lambda x: (x[0], x[1]))
    rows = [{"cluster_uuid": c, "term": t, "winner": w, "kind": k} for c, t, w, k in flagged[: fr.max_violations]]
    total_named = len(flagged)
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
    for row in rows[: max(0, fr.max_violations - len(violations))]:
        examples = ex.get((row["cluster_uuid"], row["term"]), [])
        masters = sorted({str(e["master"] or NO_MASTER) for e in examples})
        if row["kind"] == "named":
            detail = f"term {row['term']}: {row['winner']} was elected, but states of the term name {', '.join(masters)} as master"
        else:
            detail = f"term {row['term']}: states name different masters ({', '.join(masters)})"
        violations.append(Violation(ONE_MASTER, f"cluster {row['cluster_uuid']}: {detail}", examples))
    return [CheckResult(ONE_MASTER, len(twice) + total_named, violations)]
