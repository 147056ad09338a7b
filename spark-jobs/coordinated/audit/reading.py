"""Reading histories: JSONL files, folders and globs, Parquet (compacted) or lines fetched over HTTP.

Lines are parsed with the explicit schema. A line that is not an event is either the truncated last
line of its segment (a crash leaves one; only noted) or malformed (an error naming the file and line,
unless skipped and counted). File line numbers are found without collecting the input: every split of
a file is read in order inside one task, so `monotonically_increasing_id() - min(id)` per split is the
line's index in the split, and the line counts of the earlier splits (a tiny aggregate) give the offset.
That work is only done when some line is bad.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import reduce

from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from coordinated.audit.schema import (
    EVENT_COLUMNS,
    EVENT_SCHEMA,
    EVENT_TYPES,
    REQUIRED_ALWAYS,
    REQUIRED_FOR_STATES,
    STATE_TYPES,
)

CORRUPT = "_corrupt_record"
NOTES_DIR = "_coordinated_notes"  # beside compacted Parquet; Spark skips names starting with "_"
MAX_REPORTED = 5


class UnusableInput(Exception):
    """The input cannot be audited (exit code 2). The message names the file and line."""


@dataclass
class Input:
    events: DataFrame  # EVENT_COLUMNS plus `_source`
    malformed_lines: int = 0
    # {source, line, text, node, excused_seq}: the seq lost with the cut line, when it can be told
    truncated: list[dict[str, object]] = field(default_factory=list)
    persisted: list[DataFrame] = field(default_factory=list)

    @property
    def excused(self) -> list[tuple[str, int]]:
        """(node, seq) pairs whose absence a truncated last line explains."""
        return [
            (str(t["node"]), int(t["excused_seq"]))  # type: ignore[call-overload]
            for t in self.truncated
            if t.get("node") is not None and t.get("excused_seq") is not None
        ]

    def release(self) -> None:
        for df in self.persisted:
            df.unpersist()


def display_source(source: str) -> str:
    return source[5:] if source.startswith("file:/") and not source.startswith("file://") else source


def detect_format(paths: Sequence[str]) -> str:
    """'parquet' if every path is Parquet (a *.parquet path or a local folder holding *.parquet files)."""
    kinds = set()
    for p in paths:
        local = p[len("file://") :] if p.startswith("file://") else (None if "://" in p else p)
        if p.rstrip("/").endswith(".parquet") or (
            local
            and os.path.isdir(local)
            and any(name.endswith(".parquet") for _, _, files in os.walk(local) for name in files)
        ):
            kinds.add("parquet")
        else:
            kinds.add("jsonl")
    if len(kinds) > 1:
        raise UnusableInput("the inputs mix Parquet and JSONL; audit them separately or pass --format")
    return kinds.pop() if kinds else "jsonl"


def _problem(value: Column | None) -> Column:
    """Why a parsed row is not an event (null when it is one); 'blank' for an empty line."""
    missing = F.concat_ws(
        ", ",
        *[F.when(F.col(c).isNull(), F.lit(c)) for c in REQUIRED_ALWAYS],
        *[F.when(F.col("type").isin(*STATE_TYPES) & F.col(c).isNull(), F.lit(c)) for c in REQUIRED_FOR_STATES],
    )
    rule = F.when(F.col(CORRUPT).isNotNull(), F.lit("not a JSON object with the schema's field types"))
    if value is not None:
        rule = F.when(F.trim(value) == "", F.lit("blank")).when(
            F.col(CORRUPT).isNotNull(), F.lit("not a JSON object with the schema's field types")
        )
    return (
        rule.when(missing != "", F.concat(F.lit("missing field(s): "), missing))
        .when(~F.col("type").isin(*EVENT_TYPES), F.concat(F.lit("unknown event type "), F.col("type")))
        .otherwise(F.lit(None).cast(T.StringType()))
    )


def read_jsonl_lines(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """Lines of every file under `paths` with `_source`, `_block` (split start) and `_mid`."""
    try:
        raw = spark.read.option("recursiveFileLookup", "true").text(list(paths))
    except AnalysisException as e:
        raise UnusableInput(f"cannot read {', '.join(paths)}: {str(e).splitlines()[0]}") from None
    if not raw.inputFiles():
        raise UnusableInput(f"no history files found in {', '.join(paths)}")
    return raw.select(
        F.col("value"),
        F.col("_metadata.file_path").alias("_source"),
        F.col("_metadata.file_block_start").alias("_block"),
        F.monotonically_increasing_id().alias("_mid"),
    )


def parse_lines(lines: DataFrame, *, skip_malformed: bool) -> Input:
    """Parse `value` lines; `lines` has `_source` and either `_line` or (`_block`, `_mid`)."""
    schema = T.StructType([*EVENT_SCHEMA.fields, T.StructField(CORRUPT, T.StringType())])
    has_line = "_line" in lines.columns
    position = ["_line"] if has_line else ["_block", "_mid"]
    parsed = lines.select(
        "_source",
        *position,
        "value",
        F.from_json("value", schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}).alias("p"),
    ).select("_source", *position, "value", "p.*")
    # Parse once and keep the result: every check reads the events again.
    parsed = parsed.select(
        *EVENT_COLUMNS,
        "_source",
        *position,
        _problem(F.col("value")).alias("_problem"),
        F.when(F.trim("value") != "", F.substring("value", 1, 160)).alias("_raw"),
    )
    parsed = parsed.select(
        *EVENT_COLUMNS,
        "_source",
        *position,
        "_problem",
        F.when(F.col("_problem").isNotNull(), F.col("_raw")).alias("_raw"),
    ).persist(StorageLevel.MEMORY_AND_DISK)
    result = Input(
        events=parsed.filter(F.col("_problem").isNull()).select(*EVENT_COLUMNS, "_source"),
        persisted=[parsed],
    )
    bad = parsed.filter(F.col("_problem").isNotNull() & (F.col("_problem") != "blank"))
    if bad.isEmpty():
        return result

    if has_line:
        totals = parsed.groupBy("_source").agg(F.max("_line").alias("_total"))
        located = bad.join(F.broadcast(totals), "_source")
    else:
        splits = parsed.groupBy("_source", "_block").agg(F.min("_mid").alias("_first"), F.count(F.lit(1)).alias("_n"))
        before = Window.partitionBy("_source").orderBy("_block").rowsBetween(Window.unboundedPreceding, -1)
        splits = splits.select(
            "_source",
            "_block",
            "_first",
            F.coalesce(F.sum("_n").over(before), F.lit(0)).alias("_before"),
            F.sum("_n").over(Window.partitionBy("_source")).alias("_total"),
        )
        located = bad.join(F.broadcast(splits), ["_source", "_block"]).withColumn(
            "_line", F.col("_before") + F.col("_mid") - F.col("_first") + 1
        )
    located = located.withColumn("_last", F.col("_line") == F.col("_total"))
    truncated_rows = located.filter("_last").orderBy("_source").limit(1000).collect()
    result.truncated = [
        {"source": display_source(r["_source"]), "line": int(r["_line"]), "text": r["_raw"], "node": None}
        for r in truncated_rows
    ]
    middle = located.filter(~F.col("_last"))
    result.malformed_lines = middle.count()
    if result.malformed_lines and not skip_malformed:
        first = middle.orderBy("_source", "_line").limit(MAX_REPORTED).collect()
        where = "; ".join(f"{display_source(r['_source'])}:{r['_line']}: {r['_problem']}: {r['_raw']!r}" for r in first)
        more = result.malformed_lines - len(first)
        raise UnusableInput(
            f"malformed line: {where}" + (f" (and {more} more)" if more > 0 else "") + "; see --skip-malformed"
        )
    if truncated_rows:
        # The event cut short took a seq with it: the seq after the segment's last event is excused.
        sources = [r["_source"] for r in truncated_rows]
        tails = {
            display_source(r["_source"]): r
            for r in parsed.filter(F.col("_problem").isNull() & F.col("_source").isin(sources))
            .groupBy("_source")
            .agg(F.max_by("node", "seq").alias("node"), F.max("seq").alias("seq"))
            .collect()
        }
        for t in result.truncated:
            tail = tails.get(str(t["source"]))
            t["node"] = tail["node"] if tail else None
            t["excused_seq"] = int(tail["seq"]) + 1 if tail else None
    return result


def read_parquet(spark: SparkSession, paths: Sequence[str], *, skip_malformed: bool) -> Input:
    """Audit the compacted form directly; notes left by the compaction are read back."""
    try:
        df = (
            spark.read.schema(EVENT_SCHEMA)
            .option("recursiveFileLookup", "true")
            .option("pathGlobFilter", "*.parquet")
            .parquet(*paths)
        )
    except AnalysisException as e:
        raise UnusableInput(f"cannot read {', '.join(paths)}: {str(e).splitlines()[0]}") from None
    if not df.inputFiles():
        raise UnusableInput(f"no Parquet files found in {', '.join(paths)}")
    rows = df.select(*EVENT_COLUMNS, F.col("_metadata.file_path").alias("_source"), F.lit(None).alias(CORRUPT))
    rows = rows.withColumn("_problem", _problem(None)).drop(CORRUPT)
    result = Input(events=rows.filter(F.col("_problem").isNull()).select(*EVENT_COLUMNS, "_source"))
    bad = rows.filter(F.col("_problem").isNotNull())
    if not bad.isEmpty():
        result.malformed_lines = bad.count()
        if not skip_malformed:
            r = bad.limit(1).collect()[0]
            raise UnusableInput(
                f"malformed row in {display_source(r['_source'])}: {r['_problem']} "
                f"({result.malformed_lines} such rows); see --skip-malformed"
            )
    notes = _read_notes(spark, paths)
    if notes is not None:
        result.truncated = [r.asDict() for r in notes.dropDuplicates(["source", "line"]).limit(1000).collect()]
    return result


NOTES_SCHEMA = T.StructType(
    [
        T.StructField("source", T.StringType()),
        T.StructField("line", T.LongType()),
        T.StructField("text", T.StringType()),
        T.StructField("node", T.StringType()),
        T.StructField("excused_seq", T.LongType()),
    ]
)


def _read_notes(spark: SparkSession, paths: Sequence[str]) -> DataFrame | None:
    frames = []
    for p in paths:
        try:
            frames.append(spark.read.schema(NOTES_SCHEMA).json(p.rstrip("/") + "/" + NOTES_DIR))
        except AnalysisException:
            continue
    return reduce(DataFrame.unionByName, frames) if frames else None


def load(spark: SparkSession, paths: Sequence[str], *, fmt: str = "auto", skip_malformed: bool = False) -> Input:
    fmt = detect_format(paths) if fmt == "auto" else fmt
    if fmt == "parquet":
        return read_parquet(spark, paths, skip_malformed=skip_malformed)
    return parse_lines(read_jsonl_lines(spark, paths), skip_malformed=skip_malformed)
