"""Per-node invariants, from one pass over each node's events in seq order.

- history-gap: seq starts at 1 and has no holes and no repeats. A hole of one seq right after the last
  event of a segment whose last line was truncated (the cut event's seq) is excused.
- node-monotonic: the node's term never decreases (over `term`, `elected` and `accepted` events, which
  all carry the node's current term) and its applied (term, version) strictly increases.

The sort carries only numbers; the few flagged events are looked up afterwards for the examples.
"""

from __future__ import annotations

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Row, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from coordinated.audit.prepare import Frames
from coordinated.audit.schema import EXAMPLE_FIELDS, HISTORY_GAP, NODE_MONOTONIC
from coordinated.audit.violations import CheckResult, Example, Violation, as_example, first_rows

TERM_TYPES = ("term", "elected", "accepted")


def _flagged(fr: Frames) -> DataFrame:
    by_seq = Window.partitionBy("node").orderBy("seq")
    before = by_seq.rowsBetween(Window.unboundedPreceding, -1)
    is_term = F.col("type").isin(*TERM_TYPES)
    is_applied = F.col("type") == "applied"
    ev = fr.events.select("node", "seq", "type", "term", "version")
    win = ev.select(
        "node",
        "seq",
        "type",
        "term",
        "version",
        F.lag("seq").over(by_seq).alias("prev_seq"),
        F.max(F.when(is_term, F.col("term"))).over(before).alias("max_term"),
        F.max_by(F.when(is_term, F.col("seq")), F.when(is_term, F.col("term"))).over(before).alias("max_term_seq"),
        F.last(F.when(is_applied, F.struct("term", "version", "seq")), ignorenulls=True)
        .over(before)
        .alias("prev_applied"),
    )
    prev_seq = F.col("prev_seq")
    gap = (
        F.when(prev_seq.isNull() & (F.col("seq") != 1), F.lit("start"))
        .when(F.col("seq") == prev_seq, F.lit("reused"))
        .when(F.col("seq") > prev_seq + 1, F.lit("gap"))
    )
    pa = F.col("prev_applied")
    applied_back = is_applied & (
        (F.col("term") < pa.term) | ((F.col("term") == pa.term) & (F.col("version") <= pa.version))
    )
    flagged = win.select(
        "*",
        gap.alias("gap"),
        (is_term & (F.col("term") < F.col("max_term"))).alias("term_back"),
        F.coalesce(applied_back, F.lit(False)).alias("applied_back"),
    ).filter(F.col("gap").isNotNull() | F.col("term_back") | F.col("applied_back"))
    if fr.excused:
        excused = fr.spark.createDataFrame(
            list(fr.excused),
            T.StructType([T.StructField("node", T.StringType()), T.StructField("_missing", T.LongType())]),
        )
        single_hole = (F.col("gap") == "gap") & (F.col("seq") == prev_seq + 2)
        flagged = (
            flagged.withColumn("_missing", F.when(single_hole, prev_seq + 1))
            .join(F.broadcast(excused).withColumn("_excused", F.lit(True)), ["node", "_missing"], "left")
            .withColumn("gap", F.when(F.col("_excused").isNull(), F.col("gap")))
            .drop("_missing", "_excused")
            .filter(F.col("gap").isNotNull() | F.col("term_back") | F.col("applied_back"))
        )
    return flagged


def _lookup(fr: Frames, refs: set[tuple[str, int]]) -> dict[tuple[str, int], list[Example]]:
    """The example fields of a few events, by (node, seq); a reused seq gives several."""
    if not refs:
        return {}
    schema = T.StructType([T.StructField("node", T.StringType()), T.StructField("seq", T.LongType())])
    wanted = fr.spark.createDataFrame(sorted(refs), schema)
    out: dict[tuple[str, int], list[Example]] = {}
    rows = fr.events.join(F.broadcast(wanted), ["node", "seq"]).select(*EXAMPLE_FIELDS).collect()
    for r in sorted(rows, key=lambda r: (r["node"], r["seq"], r["type"])):
        out.setdefault((r["node"], r["seq"]), []).append(as_example(r) or {})
    return out


def check(fr: Frames) -> list[CheckResult]:
    flagged = _flagged(fr).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        gaps = first_rows(flagged.filter(F.col("gap").isNotNull()), ["node", "seq"], fr.max_violations)
        mono = first_rows(
            flagged.filter(F.col("term_back") | F.col("applied_back")), ["node", "seq"], fr.max_violations
        )
    finally:
        flagged.unpersist()
    refs: set[tuple[str, int]] = set()
    for r in gaps[1]:
        refs.add((r["node"], r["seq"]))
        if r["prev_seq"] is not None:
            refs.add((r["node"], r["prev_seq"]))
    for r in mono[1]:
        refs.add((r["node"], r["seq"]))
        other = r["max_term_seq"] if r["term_back"] else r["prev_applied"]["seq"]
        refs.add((r["node"], other))
    found = _lookup(fr, refs)
    return [_gaps(gaps, found), _monotonic(mono, found)]


def _pick(found: dict[tuple[str, int], list[Example]], node: str, seq: int, type_: str | None = None) -> list[Example]:
    events = found.get((node, seq), [])
    matching = [e for e in events if type_ is None or e["type"] == type_]
    return matching[:1] or events[:1]


def _gaps(result: tuple[int, list[Row]], found: dict[tuple[str, int], list[Example]]) -> CheckResult:
    total, rows = result
    violations = []
    for r in rows:
        node, seq = r["node"], r["seq"]
        if r["gap"] == "start":
            detail = f"node {node}: history starts at seq {seq}, not 1"
            examples = _pick(found, node, seq)
        elif r["gap"] == "reused":
            detail = f"node {node}: seq {seq} is used twice"
            examples = found.get((node, seq), [])[:2]
        else:
            missing = seq - r["prev_seq"] - 1
            detail = f"node {node}: seq jumps from {r['prev_seq']} to {seq} ({missing} missing)"
            examples = _pick(found, node, r["prev_seq"]) + _pick(found, node, seq)
        violations.append(Violation(HISTORY_GAP, detail, examples))
    return CheckResult(HISTORY_GAP, total, violations)


def _monotonic(result: tuple[int, list[Row]], found: dict[tuple[str, int], list[Example]]) -> CheckResult:
    total, rows = result
    violations = []
    for r in rows:
        node, seq = r["node"], r["seq"]
        if r["term_back"]:
            detail = f"node {node}: term goes back from {r['max_term']} to {r['term']} at seq {seq} ({r['type']})"
            examples = _pick(found, node, r["max_term_seq"]) + _pick(found, node, seq, r["type"])
        else:
            p = r["prev_applied"]
            detail = (
                f"node {node}: applied (term {r['term']}, version {r['version']}) at seq {seq} "
                f"after (term {p['term']}, version {p['version']}) at seq {p['seq']}"
            )
            examples = _pick(found, node, p["seq"], "applied") + _pick(found, node, seq, "applied")
        violations.append(Violation(NODE_MONOTONIC, detail, examples))
    return CheckResult(NODE_MONOTONIC, total, violations)
