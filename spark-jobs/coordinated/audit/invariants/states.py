"""unique-state-per-version and applied-only-committed (the state's part), read off the per-state table."""

from __future__ import annotations

from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql import types as T

from coordinated.audit.prepare import Frames
from coordinated.audit.schema import APPLIED_COMMITTED, STATE_TYPES, UNIQUE_STATE
from coordinated.audit.violations import CheckResult, Violation, examples_for, first_rows, local_frame

# What defines a state besides its uuid: events of one state_uuid must agree on all of them. A commit makes the
# last-committed configuration equal to the last-accepted one, so `committed` and `applied` events may carry
# that form instead of the accepted one.
CONTENT = ("term", "version", "parent_uuid", "master", "last_committed_config", "last_accepted_config")


def check(fr: Frames) -> list[CheckResult]:
    return [unique_state(fr), content(fr), applied_only_committed(fr)]


def unique_state(fr: Frames) -> CheckResult:
    """Each (term, version) has exactly one state_uuid across all nodes; a node's copy rewritten offline by
    `coordinated node-tool remove-settings` stands for the state it replaced and is not counted."""
    # The table has one row per (cid, state_uuid): a count finds the versions with several states in a hash
    # aggregation with a numeric buffer; their uuids are gathered for the few reported ones only.
    bad = (
        fr.states.filter(~F.col("rewritten"))
        .groupBy("cid", "term", "version")
        .agg(F.count(F.lit(1)).alias("n"), F.max("fresh").alias("fresh"))
        .filter((F.col("n") > 1) & F.col("fresh"))
        .withColumnRenamed("cid", "cluster_uuid")
    )
    total, rows = first_rows(bad, ["cluster_uuid", "term", "version"], fr.max_violations)
    uuids = _state_uuids(fr, rows)
    examples = examples_for(
        fr.events,
        rows,
        ["cluster_uuid", "term", "version"],
        fr.max_examples,
        where=F.col("type").isin(*STATE_TYPES),
        spread=["state_uuid"],
    )
    violations = []
    for r in rows:
        states = uuids.get(_key(r), [])
        violations.append(
            Violation(
                UNIQUE_STATE,
                f"cluster {r['cluster_uuid']}: term {r['term']} version {r['version']} has {len(states)} "
                f"different states: {', '.join(states)}",
                examples.get(_key(r), []),
            )
        )
    return CheckResult(UNIQUE_STATE, total, violations)


def _state_uuids(fr: Frames, rows: list[Row]) -> dict[tuple[str, int, int], list[str]]:
    """The state_uuids of each reported (cluster, term, version), sorted (one small job, only when any)."""
    if not rows:
        return {}
    key = ["cid", "term", "version"]
    schema = T.StructType([fr.states.schema[c] for c in key])
    wanted = local_frame(fr.spark, [_key(r) for r in rows], schema)
    found = (
        fr.states.join(F.broadcast(wanted), key, "left_semi")
        .filter(F.col("state_uuid").isNotNull())
        .select(*key, "state_uuid")
        .collect()
    )
    out: dict[tuple[str, int, int], list[str]] = {}
    for f in sorted(found, key=lambda f: f["state_uuid"]):
        out.setdefault((f["cid"], f["term"], f["version"]), []).append(f["state_uuid"])
    return out


def _key(r: Row) -> tuple[str, int, int]:
    return (r["cluster_uuid"], r["term"], r["version"])


def content(fr: Frames) -> CheckResult:
    """Events of one state_uuid carry the same state: a different parent, master or configuration under the
    same uuid is a diff applied to the wrong base (or two states given one uuid)."""
    if not fr.flags("content"):
        return CheckResult(UNIQUE_STATE, 0, [])
    bad = (
        fr.states.filter(F.col("conflict") & F.col("fresh"))
        .select(F.col("cid").alias("cluster_uuid"), "state_uuid", "term", "version")
        .orderBy("cluster_uuid", "version", "term", "state_uuid")
    )
    total, rows = first_rows(bad, ["cluster_uuid", "version", "term", "state_uuid"], fr.max_violations)
    if not rows:
        return CheckResult(UNIQUE_STATE, total, [])
    key = ["cluster_uuid", "state_uuid"]
    lcc_as_accepted = F.when(
        (F.col("type") == "accepted") | ~F.col("last_committed_config").eqNullSafe(F.col("last_accepted_config")),
        F.col("last_committed_config"),
    )
    events = fr.events.filter(F.col("type").isin(*STATE_TYPES)).withColumn(
        "_content", F.xxhash64(*CONTENT[:-2], lcc_as_accepted, "last_accepted_config")
    )
    examples = examples_for(events, rows, key, fr.max_examples, spread=["_content"])
    violations = []
    for r in rows:
        ex = examples.get((r["cluster_uuid"], r["state_uuid"]), [])
        fields = [c for c in CONTENT if len({repr(_as_accepted(e, c)) for e in ex if _as_accepted(e, c) != ()}) > 1]
        violations.append(
            Violation(
                UNIQUE_STATE,
                f"cluster {r['cluster_uuid']}: state {r['state_uuid']} is recorded with different content "
                f"({', '.join(fields) or 'fields'} differ): a diff applied to the wrong base, or two states "
                "with one uuid",
                ex,
            )
        )
    return CheckResult(UNIQUE_STATE, total, violations)


def _as_accepted(e: dict[str, object], field: str) -> object:
    """A field as the state's accepted form has it; () for a committed form that carries no such information."""
    committed_form = e["type"] != "accepted" and e["last_committed_config"] == e["last_accepted_config"]
    return () if field == "last_committed_config" and committed_form else e.get(field)


def applied_only_committed(fr: Frames) -> CheckResult:
    """Every applied state was committed by its master (the master's own `committed` event)."""
    key = ["cluster_uuid", "term", "version", "state_uuid"]
    if not fr.flags("applied"):
        return CheckResult(APPLIED_COMMITTED, 0, [])
    # A state older than the horizon may have lost its master's commit with a trimmed history.
    bad = fr.states.filter(
        F.col("applied") & ~F.col("committed") & F.col("fresh_applied") & fr.horizon.beyond()
    ).select(F.col("cid").alias("cluster_uuid"), "term", "version", "state_uuid", "committed_anywhere")
    total, rows = first_rows(bad, key, fr.max_violations)
    examples = examples_for(
        fr.events, rows, key, fr.max_examples, where=F.col("type").isin("applied", "committed"), spread=["type"]
    )
    violations = []
    for r in rows:
        why = (
            "only followers recorded a commit of it; its master never did"
            if r["committed_anywhere"]
            else "it was never committed"
        )
        violations.append(
            Violation(
                APPLIED_COMMITTED,
                f"cluster {r['cluster_uuid']}: state {r['state_uuid']} (term {r['term']}, version {r['version']}) "
                f"was applied but {why}",
                examples.get(tuple(r[c] for c in key), []),
            )
        )
    return CheckResult(APPLIED_COMMITTED, total, violations)
