"""one-master-per-term: at most one node is elected per term, and every state of term t names it."""

from __future__ import annotations

from pyspark.sql import functions as F

from coordinated.audit.prepare import NO_MASTER, Frames
from coordinated.audit.schema import ONE_MASTER, STATE_TYPES
from coordinated.audit.violations import CheckResult, Violation, examples_for, first_rows


def check(fr: Frames) -> list[CheckResult]:
    ev = fr.events
    per_term = fr.terms
    winners = F.coalesce("winners", F.array())
    others = F.filter(F.coalesce("named", F.array()), lambda m: m != F.element_at("winners", 1))
    bad = per_term.select(
        "cid",
        "term",
        "winners",
        "named",
        F.element_at("winners", 1).alias("winner"),
        F.when(F.size(winners) > 1, F.lit("elected"))
        .when((F.size(winners) == 1) & (F.size(others) > 0), F.lit("named"))
        .when((F.size(winners) == 0) & (F.size("named") > 1), F.lit("disagree"))
        .alias("kind"),
    ).filter(F.col("kind").isNotNull())
    total, rows = first_rows(bad, ["cid", "term"], fr.max_violations)
    violations = []
    master_col = F.coalesce("master", F.lit(NO_MASTER))
    by_kind = {k: [r for r in rows if r["kind"] == k] for k in ("elected", "named", "disagree")}
    ex_elected = examples_for(
        ev, by_kind["elected"], ["cid", "term"], fr.max_examples, where=F.col("type") == "elected", spread=["node"]
    )
    states = ev.filter(F.col("type").isin(*STATE_TYPES)).withColumn("_m", master_col)
    ex_named = examples_for(
        states,
        by_kind["named"],
        ["cid", "term"],
        fr.max_examples,
        where=F.col("_m") != F.col("winner"),
        spread=["_m"],
        carry=["winner"],
    )
    ex_disagree = examples_for(states, by_kind["disagree"], ["cid", "term"], fr.max_examples, spread=["_m"])
    for r in rows:
        key = (r["cid"], r["term"])
        if r["kind"] == "elected":
            detail = f"term {r['term']}: {len(r['winners'])} nodes were elected ({', '.join(r['winners'])})"
            examples = ex_elected.get(key, [])
        elif r["kind"] == "named":
            wrong = [m for m in r["named"] if m != r["winners"][0]]
            detail = (
                f"term {r['term']}: {r['winners'][0]} was elected, but states of the term name "
                f"{', '.join(wrong)} as master"
            )
            examples = ex_named.get(key, [])
        else:
            detail = f"term {r['term']}: states name different masters ({', '.join(r['named'])})"
            examples = ex_disagree.get(key, [])
        violations.append(Violation(ONE_MASTER, f"cluster {r['cid']}: {detail}", examples))
    return [CheckResult(ONE_MASTER, total, violations)]
