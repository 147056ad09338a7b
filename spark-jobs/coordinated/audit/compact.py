"""`--compact-to`: the history as Parquet, partitioned by cluster UUID and date, for faster audits.

Events of a node before bootstrap ("_na_") go to the partition of the cluster that node's history (in the
same folder) later names; their `cluster_uuid` field keeps "_na_". Compaction only ever appends, and only
the events the folder does not hold yet (matched by cluster, node, seq and a hash of every field), so
compacting new segments into an existing folder keeps everything that was there, and compacting the same
segments twice adds nothing. Notes on crash-cut last lines are kept beside the data (in
`_coordinated_notes/`, which Parquet readers skip), so that an audit of the Parquet form still lists them.
"""

from __future__ import annotations

import os

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from coordinated.audit.reading import NOTES_DIR, NOTES_SCHEMA, Input, local_path
from coordinated.audit.schema import EVENT_COLUMNS, EVENT_SCHEMA, UNBOOTSTRAPPED

MATCH = ["cluster", "node", "seq", "_h"]


def compacted(events: DataFrame) -> DataFrame:
    named = F.col("cluster_uuid") != UNBOOTSTRAPPED
    homes = events.filter(named).groupBy("_origin", "node").agg(F.min_by("cluster_uuid", "seq").alias("_home"))
    return (
        events.join(F.broadcast(homes), ["_origin", "node"], "left")
        .withColumn(
            "cluster",
            F.when(named, F.col("cluster_uuid")).otherwise(F.coalesce("_home", F.lit(UNBOOTSTRAPPED))),
        )
        .withColumn("date", F.date_format(F.timestamp_seconds(F.col("ts")), "yyyy-MM-dd"))
        .withColumn("_h", F.xxhash64(*EVENT_COLUMNS))
        .select(*EVENT_COLUMNS, "cluster", "date", "_h")
    )


def _existing(spark: SparkSession, target: str) -> DataFrame | None:
    local = local_path(target)
    if local is not None and not os.path.isdir(local):
        return None
    try:
        schema = T.StructType(
            [*EVENT_SCHEMA.fields, T.StructField("cluster", T.StringType()), T.StructField("date", T.StringType())]
        )
        df = spark.read.schema(schema).parquet(target)
    except AnalysisException:
        return None
    if not df.inputFiles():
        return None
    return df.select("cluster", "node", "seq", F.xxhash64(*EVENT_COLUMNS).alias("_h"))


def compact(spark: SparkSession, inp: Input, target: str) -> None:
    inp.checked()  # malformed input fails before anything is written
    new = compacted(inp.events)
    existing = _existing(spark, target)
    if existing is not None:
        new = new.join(existing, MATCH, "left_anti")
    (
        new.drop("_h")
        # Sorted runs of node and seq compress well and make the later per-node sort cheap.
        .sortWithinPartitions("cluster", "date", "node", "seq")
        .write.mode("append")
        .partitionBy("cluster", "date")
        .parquet(target)
    )
    _write_notes(spark, inp, target)


def _write_notes(spark: SparkSession, inp: Input, target: str) -> None:
    path = target.rstrip("/") + "/" + NOTES_DIR
    rows = {(t["source"], t["line"]): t for t in inp.truncated}
    try:  # merge with the notes of earlier compactions into the same folder
        for r in spark.read.schema(NOTES_SCHEMA).json(path).collect():
            rows.setdefault((r["source"], r["line"]), r.asDict())
    except AnalysisException:
        pass
    data = [tuple(t.get(f.name) for f in NOTES_SCHEMA.fields) for t in rows.values()]
    spark.createDataFrame(data, NOTES_SCHEMA).coalesce(1).write.mode("overwrite").json(path)
