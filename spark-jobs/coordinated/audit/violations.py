"""Violations and their example events: found with DataFrames, only a few rows reach the driver."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from coordinated.audit.reading import OPENERS, display_source
from coordinated.audit.schema import EXAMPLE_FIELDS

Example = dict[str, object]


@dataclass
class Violation:
    invariant: str
    detail: str
    examples: list[Example] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"invariant": self.invariant, "detail": self.detail, "examples": self.examples}


@dataclass
class CheckResult:
    invariant: str
    total: int  # how many violations there are in all; `violations` lists the first few
    violations: list[Violation] = field(default_factory=list)


LOCAL_ROWS = 100_000


def local_frame(spark: SparkSession, rows: Sequence[Sequence[Any]], schema: T.StructType) -> DataFrame:
    """A small DataFrame of driver-side rows. Up to `LOCAL_ROWS` of them travel as one JSON literal parsed in
    the JVM: a Python list given to `createDataFrame` is read back by Python workers, which cost a second or
    two to start, and a literal per value costs a Py4J call each."""
    if len(rows) > LOCAL_ROWS:
        return spark.createDataFrame([tuple(r) for r in rows], schema)
    text = json.dumps([dict(zip(schema.fieldNames(), r, strict=True)) for r in rows])
    return spark.range(1).select(F.inline(F.from_json(F.lit(text), T.ArrayType(schema))))


def as_example(row: Row | None) -> Example | None:
    """Every field of the event, and the file it is in."""
    if row is None:
        return None
    d = row.asDict()
    out: Example = {k: d.get(k) for k in EXAMPLE_FIELDS}
    if d.get("_source") is not None:
        out["file"] = display_source(str(d["_source"]))
    return out


def lookup_events(events: DataFrame, refs: set[tuple[str, str, int]]) -> dict[tuple[str, str, int], list[Example]]:
    """The example fields of a few events, by (cluster_uuid, node, seq); a reused seq gives several."""
    if not refs:
        return {}
    schema = T.StructType(
        [
            T.StructField("cluster_uuid", T.StringType()),
            T.StructField("node", T.StringType()),
            T.StructField("seq", T.LongType()),
        ]
    )
    wanted = local_frame(events.sparkSession, sorted(refs), schema)
    out: dict[tuple[str, str, int], list[Example]] = {}
    rows = events.join(F.broadcast(wanted), ["cluster_uuid", "node", "seq"]).collect()
    for r in sorted(rows, key=lambda r: (r["node"], r["seq"], r["type"], r["_source"] or "")):
        out.setdefault((r["cluster_uuid"], r["node"], r["seq"]), []).append(as_example(r) or {})
    return out


def examples_for(
    events: DataFrame,
    keys: Sequence[Row | Mapping[str, Any]],
    key_cols: Sequence[str],
    per_key: int,
    *,
    where: Column | None = None,
    order: Sequence[str | Column] = ("seq", "node"),
    spread: Sequence[str] = (),
    carry: Sequence[str] = (),
) -> dict[tuple[object, ...], list[Example]]:
    """Up to `per_key` events for each of a few violation keys.

    `spread` names columns to vary the examples over (one row per distinct value first), so that,
    say, both of two conflicting state_uuids appear among the examples. `carry` names string fields of
    the key rows that `where` may use (e.g. the elected master of the term).
    """
    if not keys:
        return {}
    spark = events.sparkSession
    schema = T.StructType([events.schema[c] for c in key_cols] + [T.StructField(c, T.StringType()) for c in carry])
    wanted = local_frame(spark, [tuple(k[c] for c in (*key_cols, *carry)) for k in keys], schema)
    df = events.join(F.broadcast(wanted), list(key_cols))
    if where is not None:
        df = df.filter(where)
    if spread:
        df = df.withColumn("_spread", F.row_number().over(Window.partitionBy(*key_cols, *spread).orderBy(*order)))
        order = ["_spread", *order]
    df = df.withColumn("_rn", F.row_number().over(Window.partitionBy(*key_cols).orderBy(*order)))
    out: dict[tuple[object, ...], list[Example]] = {}
    for r in df.filter(F.col("_rn") <= per_key).orderBy(*key_cols, "_rn").collect():
        out.setdefault(tuple(r[c] for c in key_cols), []).append(as_example(r) or {})
    return out


def first_rows(df: DataFrame, order: Sequence[str | Column], limit: int) -> tuple[int, list[Row]]:
    """How many rows `df` has, and the first `limit` of them in a stable order.

    One job when there are fewer than `limit + 1` rows (the usual case: none); counts only otherwise.
    """
    rows = df.orderBy(*order).limit(limit + 1).collect()
    total = len(rows) if len(rows) <= limit else df.count()
    return total, rows[:limit]


_SEQ = re.compile(rb'"seq"\s*:\s*(\d+)')
_NODE = re.compile(rb'"node"\s*:\s*"((?:[^"\\]|\\.)*)"')


def add_line_numbers(violations: Sequence[Violation]) -> None:
    """Give each example from a local JSONL file its `line`: one read of each file the examples are in."""
    wanted: dict[str, dict[tuple[str, int], list[Example]]] = {}
    for v in violations:
        for e in v.examples:
            f = e.get("file")
            if isinstance(f, str) and not f.endswith(".parquet") and e.get("seq") is not None:
                wanted.setdefault(f, {}).setdefault((str(e.get("node")), int(e["seq"])), []).append(e)  # type: ignore[call-overload]
    for f, refs in wanted.items():
        opener = OPENERS.get(os.path.splitext(f)[1], open)
        try:
            with opener(f, "rb") as fh:
                for number, line in enumerate(fh, start=1):
                    m = _SEQ.search(line)
                    if m is None:
                        continue
                    n = _NODE.search(line)
                    for e in refs.get((n.group(1).decode("utf-8", "replace") if n else "", int(m.group(1))), []):
                        e.setdefault("line", number)
        except (OSError, EOFError, ValueError):
            continue  # the examples keep file and seq
