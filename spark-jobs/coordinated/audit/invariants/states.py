"""unique-state-per-version and applied-only-committed, both read off the per-state table."""

from __future__ import annotations

from pyspark.sql import functions as F

from coordinated.audit.prepare import Frames
from coordinated.audit.schema import APPLIED_COMMITTED, STATE_TYPES, UNIQUE_STATE
from coordinated.audit.violations import CheckResult, Violation, examples_for, first_rows


def check(fr: Frames) -> list[CheckResult]:
    return [unique_state(fr), applied_only_committed(fr)]


def unique_state(fr: Frames) -> CheckResult:
    """Each (term, version) has exactly one state_uuid across all nodes."""
    bad = (
        fr.states.groupBy("cid", "term", "version")
        .agg(F.sort_array(F.collect_set("state_uuid")).alias("uuids"))
        .filter(F.size("uuids") > 1)
    )
    total, rows = first_rows(bad, ["cid", "term", "version"], fr.max_violations)
    examples = examples_for(
        fr.events,
        rows,
        ["cid", "term", "version"],
        fr.max_examples,
        where=F.col("type").isin(*STATE_TYPES),
        spread=["state_uuid"],
    )
    violations = [
        Violation(
            UNIQUE_STATE,
            f"cluster {r['cid']}: term {r['term']} version {r['version']} has {len(r['uuids'])} "
            f"different states: {', '.join(r['uuids'])}",
            examples.get((r["cid"], r["term"], r["version"]), []),
        )
        for r in rows
    ]
    return CheckResult(UNIQUE_STATE, total, violations)


def applied_only_committed(fr: Frames) -> CheckResult:
    """Every applied state was committed (by a `committed` event on some node)."""
    key = ["cid", "term", "version", "state_uuid"]
    bad = fr.states.filter(F.col("applied") & ~F.col("committed")).select(*key)
    total, rows = first_rows(bad, key, fr.max_violations)
    examples = examples_for(fr.events, rows, key, fr.max_examples, where=F.col("type") == "applied")
    violations = [
        Violation(
            APPLIED_COMMITTED,
            f"cluster {r['cid']}: state {r['state_uuid']} (term {r['term']}, version {r['version']}) "
            "was applied but never committed",
            examples.get(tuple(r[c] for c in key), []),
        )
        for r in rows
    ]
    return CheckResult(APPLIED_COMMITTED, total, violations)
