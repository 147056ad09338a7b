"""commit-quorum: every quorum on a master's `committed` event is a majority of both configurations.

The shared state table already flags the states with such an event, so the events themselves are
only read again when there is a violation to describe.
"""

from __future__ import annotations

from pyspark.sql import functions as F
from pyspark.sql import types as T

from coordinated.audit.prepare import Frames, majority_of
from coordinated.audit.schema import COMMIT_QUORUM, EXAMPLE_FIELDS
from coordinated.audit.violations import CheckResult, Violation, as_example, first_rows

KEY = ["cid", "term", "version", "state_uuid"]


def check(fr: Frames) -> list[CheckResult]:
    flagged = fr.states.filter("bad_quorum").select(*KEY).limit(10_000).collect()
    if not flagged:
        return [CheckResult(COMMIT_QUORUM, 0, [])]
    schema = T.StructType([fr.events.schema[c] if c != "cid" else T.StructField("cid", T.StringType()) for c in KEY])
    keys = fr.spark.createDataFrame([tuple(r) for r in flagged], schema)
    bad = (
        fr.events.join(F.broadcast(keys), KEY)
        .filter((F.col("type") == "committed") & F.col("quorum").isNotNull())
        .select(
            "cid",
            *EXAMPLE_FIELDS,
            "quorum",
            "last_committed_config",
            "last_accepted_config",
            majority_of("last_committed_config").alias("ok_committed"),
            majority_of("last_accepted_config").alias("ok_accepted"),
        )
        .filter(~F.col("ok_committed") | ~F.col("ok_accepted"))
    )
    total, rows = first_rows(bad, ["cid", "term", "version", "node", "seq"], fr.max_violations)
    total = max(total, fr.states.filter("bad_quorum").count()) if len(flagged) >= 10_000 else total
    violations = []
    for r in rows:
        which = [
            f"{col} {sorted(r[col] or [])}"
            for col, ok in (
                ("last_committed_config", r["ok_committed"]),
                ("last_accepted_config", r["ok_accepted"]),
            )
            if not ok
        ]
        detail = (
            f"cluster {r['cid']}: {r['node']} committed term {r['term']} version {r['version']} with quorum "
            f"{sorted(r['quorum'])}, which is not a majority of {' nor of '.join(which)}"
        )
        violations.append(Violation(COMMIT_QUORUM, detail, [as_example(r) or {}]))
    return [CheckResult(COMMIT_QUORUM, total, violations)]
