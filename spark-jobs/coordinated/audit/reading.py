"""Reading histories: JSONL files, folders and globs, Parquet (compacted) or lines fetched over HTTP.

Lines are parsed with the explicit schema. What a complete line is comes from `coordinated.coordination.history_lines`,
the definition the sidecar's writer uses too: the bytes after a file's last newline are a crash-cut line.
It is never an event (even when it is a whole JSON object lacking only its newline: the writer gives its
seq to the next event); it is noted in the report and skipped. Every other line that is not an event is
malformed: an error naming the file and line, unless skipped and counted. The end of each file is looked
at on the driver (one seek; compressed files are decompressed, which also proves them intact). File line
numbers are found without collecting the input: every split of a file is read in order inside one task,
so `monotonically_increasing_id() - min(id)` per split is the line's index in the split, and the line
counts of the earlier splits (a tiny aggregate) give the offset. That work is only done when a line is bad.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import Any
from urllib.parse import unquote, urlparse

import zstandard
from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, Observation, Row, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from coordinated.audit import segments
from coordinated.audit.schema import (
    EVENT_COLUMNS,
    EVENT_SCHEMA,
    EVENT_TYPES,
    NODE_NAME,
    NODE_NAME_COLUMN,
    REQUIRED_ALWAYS,
    REQUIRED_FOR_STATES,
    RESET_TYPES,
    STATE_TYPES,
    UNBOOTSTRAPPED,
)
from coordinated.coordination.history_format import format_problem
from coordinated.coordination.history_lines import NEWLINE, ends_with_cut_line

CORRUPT = "_corrupt_record"
CARRIED = "_carried"  # an event an incremental audit's checkpoint carried in from an earlier audit
NOTES_DIR = "_coordinated_notes"  # beside compacted Parquet; Spark skips names starting with "_"
MAX_REPORTED = 5
_CHUNK = 1 << 20
_NODE = re.compile(r'"node"\s*:\s*"((?:[^"\\]|\\.)*)"')
OPENERS: dict[str, Any] = {
    ".gz": gzip.open,
    ".bz2": bz2.open,
    ".xz": lzma.open,
    ".zst": lambda path, _mode: segments.open_source(path),
}


class UnusableInput(Exception):
    """The input cannot be audited (exit code 2). The message names the file (and line, where there is one)."""


def folder_of(source: str) -> str:
    """`origin_of` on the driver, for one file."""
    return source[: source.rindex("/")] if "/" in source else source


@dataclass
class Scout:
    """What the audit must know before its passes, from the same job that looks for malformed rows: the time
    range (the lag's time bins) and the reset events (the per-node window's epochs). Resets are rare: past
    `MAX_SCOUTED_RESETS` the list is None and the window counts them itself. The same job gathers who the
    nodes are for the report (their names, and the node ids the states name), so no pass of its own does."""

    first_ts: float | None
    last_ts: float | None
    resets: list[Row] | None  # cluster_uuid, node, _origin, seq of each reset event
    names: list[Row] = field(default_factory=list)  # distinct (node, name) pairs
    # distinct (cluster_uuid, last_committed_config, last_accepted_config, quorum, master) of bootstrapped events
    refs: list[Row] = field(default_factory=list)
    events: int = 0
    # cluster_uuid, node, first_kept_seq, marks_accepted of each `retention_cut` event; None past MAX_SCOUTED_CUTS
    cuts: list[Row] | None = field(default_factory=list)


MAX_SCOUTED_RESETS = 200
MAX_SCOUTED_CUTS = 20_000
RETENTION_CUT = "retention_cut"
REFS = ("last_committed_config", "last_accepted_config", "quorum", "master")  # the node ids an event names
SCOUTED_OK = "_s_ok"  # the scout's column: the row is an event (not malformed)


@dataclass
class Scouting:
    """How a pass over the input's rows also scouts them: it adds `columns` (the scout's narrow inputs, and
    `SCOUTED_OK`) to its own first projection, passes the result through `watch`, and only then keeps the
    events it needs (`SCOUTED_OK`)."""

    rows: DataFrame  # every row read, with `_source` and `_problem` (null for an event)
    columns: list[Column]
    watch: Callable[[DataFrame], DataFrame]


@dataclass
class Input:
    events: DataFrame  # EVENT_COLUMNS plus `_source` (and `_origin`: the folder the events came from)
    malformed_lines: int = 0
    # {source, line, text, node}: crash-cut last lines, noted and skipped
    truncated: list[dict[str, object]] = field(default_factory=list)
    persisted: list[DataFrame] = field(default_factory=list)
    scout: Scout | None = None  # None: `settle` gives it after the first pass, or the audit finds it out itself
    # Parquet: the malformed-row check and the scout are observed (`DataFrame.observe`) in the first pass
    # over the rows (the state table's), and `settle` reads them afterwards.
    scouting: Scouting | None = None
    settle: Callable[[], Scout] | None = None
    origin: Callable[[str], str] = folder_of  # a `_source`'s `_origin`, on the driver

    def release(self) -> None:
        for df in self.persisted:
            df.unpersist()

    def checked(self) -> Scout | None:
        """The scout, after the malformed-row check has run (a job of its own if no pass has done it yet)."""
        if self.settle is not None:
            return self.settle()
        return self.scout


def display_source(source: str) -> str:
    if source.startswith("file:"):
        return "/" + unquote(source[5:]).lstrip("/")
    return source


def local_path(uri: str) -> str | None:
    if uri.startswith("file:"):
        return unquote(urlparse(uri).path)
    return None if "://" in uri else uri


def origin_of(source: Column) -> Column:
    """The folder a file is in: a node's history folder, or a compacted cluster partition. A string function
    per event costs about a microsecond: the passes carry `_source` and ask for this where they need it."""
    return F.regexp_replace(source, "/[^/]*$", "")


def detect_format(paths: Sequence[str]) -> str:
    """'parquet' if every path is Parquet (a *.parquet path or a local folder holding *.parquet files)."""
    kinds = set()
    for p in paths:
        local = local_path(p)
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


def cut_line(path: str) -> tuple[int, bytes] | None:
    """(line number, bytes) of a local file's crash-cut last line, or None if it ends complete.

    A compressed file is read to its end, so a damaged one is unusable input here, naming the file; so is a
    file whose first line declares a history format this release does not read.
    """
    opener = OPENERS.get(os.path.splitext(path)[1])
    try:
        with (opener or open)(path, "rb") as fh:
            problem = format_problem(fh.readline(_CHUNK))
        if problem:
            raise UnusableInput(f"{path} {problem}")
        if opener is None:
            size = os.path.getsize(path)
            with open(path, "rb") as fh:
                fh.seek(max(0, size - 1))
                if not ends_with_cut_line(fh.read(1)):
                    return None
        newlines, tail = 0, b""
        with (opener or open)(path, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                newlines += chunk.count(NEWLINE)
                tail = (tail + chunk)[-_CHUNK:] if NEWLINE not in chunk else chunk[chunk.rindex(NEWLINE) + 1 :]
    except (OSError, EOFError, zlib.error, lzma.LZMAError, ValueError, zstandard.ZstdError) as e:
        raise UnusableInput(f"cannot read {path}: {e}") from None
    return (newlines + 1, tail) if ends_with_cut_line(tail) else None


def _remote_cut_line(spark: SparkSession, uri: str) -> tuple[int | None, bytes] | None:
    """The same for an uncompressed file on a Hadoop file system (no line number: it would mean reading it)."""
    if os.path.splitext(uri)[1] in OPENERS:
        return None  # compressed and remote: a bad last line is reported as malformed
    jvm = spark.sparkContext._jvm
    assert jvm is not None, "a SparkSession always has its JVM gateway"
    hpath = jvm.org.apache.hadoop.fs.Path(uri)
    fs = hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    size = fs.getFileStatus(hpath).getLen()
    n = int(min(size, _CHUNK))
    if n == 0:
        return None
    stream = fs.open(hpath)
    try:
        # A byte[] that py4j returns arrives as bytes; one passed in to be filled would be a copy left empty.
        stream.seek(size - n)
        tail = bytes(stream.readNBytes(n))
    finally:
        stream.close()
    if not ends_with_cut_line(tail):
        return None
    return None, tail[tail.rindex(NEWLINE) + 1 :] if NEWLINE in tail else tail


# Per file URI: its crash-cut last line as (line number or None, bytes), or None; for files a caller has already
# read (the archive's objects, whose integrity check reads them whole), so that they are not read again here.
KnownTails = Mapping[str, tuple[int | None, bytes] | None]


def crash_cut_lines(
    spark: SparkSession, files: Sequence[str], known: KnownTails | None = None
) -> dict[str, dict[str, object]]:
    """Per file URI (as Spark names it in `_metadata.file_path`): the note for its crash-cut last line."""
    notes: dict[str, dict[str, object]] = {}
    for uri in files:
        local = local_path(uri)
        if known is not None and uri in known:
            found = known[uri]
        else:
            found = cut_line(local) if local is not None else _remote_cut_line(spark, uri)
        if found is None:
            continue
        line, raw = found
        text = raw.decode("utf-8", errors="replace")
        m = _NODE.search(text)
        source = "file:" + local if local is not None else uri
        notes[source] = {"source": display_source(source), "line": line, "text": text[:160], "node": m and m.group(1)}
        notes[source]["_text"] = text.rstrip("\r")
    return notes


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
    problem = (
        rule.when(missing != "", F.concat(F.lit("missing field(s): "), missing))
        .when(~F.col("type").isin(*EVENT_TYPES), F.concat(F.lit("unknown event type "), F.col("type")))
        .otherwise(F.lit(None).cast(T.StringType()))
    )
    # The message is built only for the rows that are not events: a cheap test first (every row takes it).
    complete = reduce(lambda a, b: a & b, [F.col(c).isNotNull() for c in REQUIRED_ALWAYS]) & (
        ~F.col("type").isin(*STATE_TYPES)
        | reduce(lambda a, b: a & b, [F.col(c).isNotNull() for c in REQUIRED_FOR_STATES])
    )
    event = F.col(CORRUPT).isNull() & complete & F.col("type").isin(*EVENT_TYPES)  # a blank line has no fields
    return F.when(~event, problem)


def _scout_inputs(ok: Column, origin: Column, name: Column | None) -> list[Column]:
    """What the scout aggregates, one narrow column each (null where the row adds nothing): computed in the
    pass's generated code, so the aggregation (an observation, where it is one) sees a few columns per row
    instead of the whole event."""
    reset = ok & F.col("type").isin(*RESET_TYPES)
    named = (
        [F.when(ok & name.isNotNull(), F.struct("node", name.alias("name"))).alias("_s_name")]
        if name is not None
        else []
    )
    return [
        ok.alias(SCOUTED_OK),
        F.when(ok, F.col("ts")).alias("_s_ts"),
        F.when(reset, F.struct("cluster_uuid", "node", origin.alias("_origin"), "seq")).alias("_s_reset"),
        F.when(
            ok & (F.col("type") == RETENTION_CUT),
            F.struct("cluster_uuid", "node", "first_kept_seq", "marks_accepted"),
        ).alias("_s_cut"),
        F.when(
            ok
            & (F.col("cluster_uuid") != UNBOOTSTRAPPED)
            & reduce(lambda a, b: a | b, [F.col(c).isNotNull() for c in REFS]),
            F.struct("cluster_uuid", *REFS),
        ).alias("_s_ref"),
        *named,
    ]


def _scout_aggregates(names: bool) -> list[Column]:
    """The scout over `_scout_inputs`."""
    return [
        F.count_if(SCOUTED_OK).alias("_events"),
        *([F.collect_set("_s_name").alias("_names")] if names else []),
        F.collect_set("_s_ref").alias("_refs"),
        F.min("_s_ts").alias("_first_ts"),
        F.max("_s_ts").alias("_last_ts"),
        F.count("_s_reset").alias("_n_resets"),
        F.slice(F.collect_list("_s_reset"), 1, MAX_SCOUTED_RESETS).alias("_resets"),
        F.count("_s_cut").alias("_n_cuts"),
        F.slice(F.collect_list("_s_cut"), 1, MAX_SCOUTED_CUTS).alias("_cuts"),
    ]


def _scout_of(r: Row | Mapping[str, Any]) -> Scout:
    resets = list(r["_resets"]) if r["_n_resets"] <= MAX_SCOUTED_RESETS else None
    names = list(r["_names"]) if "_names" in r else []
    cuts = list(r["_cuts"]) if r["_n_cuts"] <= MAX_SCOUTED_CUTS else None
    return Scout(r["_first_ts"], r["_last_ts"], resets, names, list(r["_refs"]), int(r["_events"]), cuts)


def merged_scouts(a: Scout, b: Scout) -> Scout:
    """What two inputs' scouts found together (an incremental audit's new events and its carried ones)."""

    def joined(x: list[Row] | None, y: list[Row] | None) -> list[Row] | None:
        return None if x is None or y is None else [*x, *y]

    def pick(f: Callable[..., float], x: float | None, y: float | None) -> float | None:
        return y if x is None else x if y is None else f(x, y)

    return Scout(
        pick(min, a.first_ts, b.first_ts),
        pick(max, a.last_ts, b.last_ts),
        joined(a.resets, b.resets),
        [*a.names, *b.names],
        [*a.refs, *b.refs],
        a.events + b.events,
        joined(a.cuts, b.cuts),
    )


def scout(events: DataFrame) -> Scout:
    """The scout for events that were read without one (one narrow job)."""
    name = F.col(NODE_NAME_COLUMN) if NODE_NAME_COLUMN in events.columns else None
    inputs = events.select(*_scout_inputs(F.lit(True), F.col("_origin"), name))
    return _scout_of(inputs.agg(*_scout_aggregates(name is not None)).collect()[0])


EXPANDED_SCHEMA = T.StructType(
    [
        T.StructField("value", T.StringType()),
        T.StructField("_source", T.StringType()),
        T.StructField("_block", T.LongType()),
        T.StructField("_mid", T.LongType()),
    ]
)


def read_jsonl_lines(
    spark: SparkSession,
    paths: Sequence[str],
    select: Callable[[list[str]], list[str]] | None = None,
    known: KnownTails | None = None,
) -> tuple[DataFrame, list[dict[str, object]]]:
    """Lines of every file under `paths` (or of those `select` keeps) with `_source`, `_block` (split start) and
    `_mid`, without the crash-cut last lines, and the notes for those. Compressed (`.zst`) and format-2
    segments are read and expanded in Python tasks (`segments`); every other file by Spark's text reader.
    `known` has the crash-cut last lines already found (the archive's objects)."""
    try:
        raw = spark.read.option("recursiveFileLookup", "true").text(list(paths))
    except AnalysisException as e:
        raise UnusableInput(f"cannot read {', '.join(paths)}: {str(e).splitlines()[0]}") from None
    listed = raw.inputFiles()
    if not listed:
        raise UnusableInput(f"no history files found in {', '.join(paths)}")
    files = select(list(listed)) if select is not None else list(listed)
    newer = segments.newer_format_problem(files)
    if newer is not None:
        raise UnusableInput(newer)
    cuts = crash_cut_lines(spark, files, known)
    native, expanded = segments.split(files)
    frames = []
    if native:
        source = raw if len(native) == len(listed) else spark.read.text(native)
        lines = source.select(
            F.col("value"),
            F.col("_metadata.file_path").alias("_source"),
            F.col("_metadata.file_block_start").alias("_block"),
            F.monotonically_increasing_id().alias("_mid"),
        )
        if cuts:
            is_cut = reduce(
                lambda a, b: a | b,
                [(F.col("_source") == src) & (F.col("value") == str(n["_text"])) for src, n in cuts.items()],
            )
            lines = lines.filter(~is_cut)
        frames.append(lines)
    local = [uri for uri in expanded if not segments.is_remote(uri)]
    remote = [uri for uri in expanded if segments.is_remote(uri)]
    if local:
        groups = segments.batches(local, spark.sparkContext.defaultParallelism)
        rdd = spark.sparkContext.parallelize(groups, len(groups)).mapPartitions(segments.rows_of_batches)
        frames.append(spark.createDataFrame(rdd, EXPANDED_SCHEMA))
    if remote:
        contents = spark.read.format("binaryFile").load(remote).select("path", "content").rdd
        rdd = contents.map(lambda row: (row[0], row[1])).mapPartitions(segments.rows_of_contents)
        frames.append(spark.createDataFrame(rdd, EXPANDED_SCHEMA))
    if not frames:  # nothing new to read: an empty frame of the same shape
        frames.append(spark.createDataFrame([], EXPANDED_SCHEMA))
    lines = reduce(DataFrame.unionByName, frames)
    return lines, [{k: v for k, v in n.items() if not k.startswith("_")} for n in cuts.values()]


def parse_lines(lines: DataFrame, *, skip_malformed: bool) -> Input:
    """Parse `value` lines; `lines` has `_source` and either `_line` or (`_block`, `_mid`)."""
    schema = T.StructType(
        [*EVENT_SCHEMA.fields, T.StructField(NODE_NAME, T.StringType()), T.StructField(CORRUPT, T.StringType())]
    )
    has_line = "_line" in lines.columns
    position = ["_line"] if has_line else ["_block", "_mid"]
    parsed = lines.select(
        "_source",
        *position,
        "value",
        F.from_json("value", schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}).alias("p"),
    ).select("_source", *position, "value", "p.*")
    parsed = parsed.select(
        *EVENT_COLUMNS,
        F.col(NODE_NAME).alias(NODE_NAME_COLUMN),
        "_source",
        *position,
        _problem(F.col("value")).alias("_problem"),
        F.when(F.trim("value") != "", F.substring("value", 1, 160)).alias("_raw"),
    )
    parsed = parsed.select(
        *EVENT_COLUMNS,
        NODE_NAME_COLUMN,
        "_source",
        *position,
        "_problem",
        F.when(F.col("_problem").isNotNull(), F.col("_raw")).alias("_raw"),
    ).persist(StorageLevel.MEMORY_AND_DISK)
    # Fetched lines come from one sidecar per URL; files from a node's folder.
    origin = F.col("_source") if has_line else origin_of(F.col("_source"))
    result = Input(
        events=parsed.filter(F.col("_problem").isNull()).select(
            *EVENT_COLUMNS, NODE_NAME_COLUMN, "_source", origin.alias("_origin"), F.lit(False).alias(CARRIED)
        ),
        persisted=[parsed],
        origin=(lambda source: source) if has_line else folder_of,
    )
    is_bad = F.col("_problem").isNotNull() & (F.col("_problem") != "blank")
    bad = parsed.filter(is_bad)
    # One job reads (and caches) every line: it counts the malformed ones and scouts the events.
    inputs = parsed.select(
        is_bad.alias("_s_bad"), *_scout_inputs(F.col("_problem").isNull(), origin, F.col(NODE_NAME_COLUMN))
    )
    checked = inputs.agg(F.count_if("_s_bad").alias("_bad"), *_scout_aggregates(True)).collect()[0]
    result.scout = _scout_of(checked)
    if checked["_bad"] == 0:
        return result

    if has_line:
        located = bad
    else:
        splits = parsed.groupBy("_source", "_block").agg(F.min("_mid").alias("_first"), F.count(F.lit(1)).alias("_n"))
        before = Window.partitionBy("_source").orderBy("_block").rowsBetween(Window.unboundedPreceding, -1)
        splits = splits.select(
            "_source", "_block", "_first", F.coalesce(F.sum("_n").over(before), F.lit(0)).alias("_before")
        )
        located = bad.join(F.broadcast(splits), ["_source", "_block"]).withColumn(
            "_line", F.col("_before") + F.col("_mid") - F.col("_first") + 1
        )
    result.malformed_lines = int(checked["_bad"])
    if not skip_malformed:
        first = located.orderBy("_source", "_line").limit(MAX_REPORTED).collect()
        where = "; ".join(f"{display_source(r['_source'])}:{r['_line']}: {r['_problem']}: {r['_raw']!r}" for r in first)
        more = result.malformed_lines - len(first)
        raise UnusableInput(
            f"malformed line: {where}" + (f" (and {more} more)" if more > 0 else "") + "; see --skip-malformed"
        )
    return result


PARQUET_MAGIC = b"PAR1"


def check_parquet_files(files: Sequence[str]) -> None:
    """A local Parquet file must start and end with the format's magic bytes (a cut copy does not)."""
    for uri in files:
        path = local_path(uri)
        if path is None:
            continue
        try:
            size = os.path.getsize(path)
            with open(path, "rb") as fh:
                head = fh.read(4)
                fh.seek(max(0, size - 4))
                tail = fh.read(4)
        except OSError as e:
            raise UnusableInput(f"cannot read {path}: {e}") from None
        if size < 12 or head != PARQUET_MAGIC or tail != PARQUET_MAGIC:
            raise UnusableInput(f"{path} is not a complete Parquet file (truncated or corrupt)")


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
    files = df.inputFiles()
    if not files:
        raise UnusableInput(f"no Parquet files found in {', '.join(paths)}")
    check_parquet_files(files)
    source = F.col("_metadata.file_path")
    rows = df.select(*EVENT_COLUMNS, source.alias("_source"), F.lit(None).alias(CORRUPT))
    rows = rows.withColumn("_problem", _problem(None)).drop(CORRUPT)
    # The malformed rows' count and the scout are observed during the audit's first pass (no pass of their
    # own): `settle` reads them afterwards, and fails as an eager check would have.
    observation = Observation()
    watched: list[DataFrame] = []

    def watch(frame: DataFrame) -> DataFrame:
        observed = frame.observe(observation, F.count_if("_s_bad").alias("_bad"), *_scout_aggregates(False))
        watched.append(observed)
        return observed

    columns = [
        F.col("_problem").isNotNull().alias("_s_bad"),
        *_scout_inputs(F.col("_problem").isNull(), origin_of(F.col("_source")), None),
    ]
    events = rows.filter(F.col("_problem").isNull()).select(
        *EVENT_COLUMNS,
        F.lit(None).cast(T.StringType()).alias(NODE_NAME_COLUMN),  # compaction keeps the contract's fields
        "_source",
        origin_of(F.col("_source")).alias("_origin"),
        F.lit(False).alias(CARRIED),
    )
    result = Input(events=events, scouting=Scouting(rows, columns, watch))

    def settle() -> Scout:
        jo = observation._jo
        if jo is None or not jo.future().isCompleted():
            # No pass observed them yet: one narrow job.
            (watched[-1] if watched else watch(rows.select(*columns))).agg(F.count(F.lit(1))).collect()
        checked = observation.get
        if checked["_bad"]:
            result.malformed_lines = int(checked["_bad"])
            if not skip_malformed:
                r = rows.filter(F.col("_problem").isNotNull()).limit(1).collect()[0]
                raise UnusableInput(
                    f"malformed row in {display_source(r['_source'])}: {r['_problem']} "
                    f"({result.malformed_lines} such rows); see --skip-malformed"
                )
        result.scout = _scout_of(checked)
        result.settle = None
        return result.scout

    result.settle = settle
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


def load(
    spark: SparkSession,
    paths: Sequence[str],
    *,
    fmt: str = "auto",
    skip_malformed: bool = False,
    select: Callable[[list[str]], list[str]] | None = None,
    known_tails: KnownTails | None = None,
) -> Input:
    """The input's events; `select` picks the files to read among those found (an incremental audit's)."""
    fmt = detect_format(paths) if fmt == "auto" else fmt
    if fmt == "parquet":
        if select is not None:
            raise UnusableInput("an incremental audit (--checkpoint) reads history segments, not Parquet")
        return read_parquet(spark, paths, skip_malformed=skip_malformed)
    lines, cuts = read_jsonl_lines(spark, paths, select, known_tails)
    result = parse_lines(lines, skip_malformed=skip_malformed)
    result.truncated = cuts
    return result
