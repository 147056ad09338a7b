"""Violations and their example events: found with DataFrames, only a few rows reach the driver."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, Row, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

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


def example_struct() -> Column:
    """The fields of an event that let a person find it (docs/audit.md asks for these)."""
    return F.struct(*[F.col(c) for c in EXAMPLE_FIELDS])


def as_example(row: Row | None) -> Example | None:
    if row is None:
        return None
    return {k: row[k] for k in EXAMPLE_FIELDS}


def examples_for(
    events: DataFrame,
    keys: Sequence[Row],
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
    wanted = spark.createDataFrame([tuple(k[c] for c in (*key_cols, *carry)) for k in keys], schema)
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
