"""`--compact-to`: the history as Parquet, partitioned by cluster UUID and date, for faster audits.

Events of a node before bootstrap ("_na_") go to the partition of the cluster that node later joined
(their `cluster_uuid` field keeps "_na_"). Re-compacting replaces only the partitions written again.
Notes on truncated last lines are kept beside the data (in `_coordinated_notes/`, which Parquet
readers skip), so that an audit of the Parquet form still excuses the seq a cut line took.
"""

from __future__ import annotations

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from coordinated.audit.prepare import with_cluster
from coordinated.audit.reading import NOTES_DIR, NOTES_SCHEMA, Input
from coordinated.audit.schema import EVENT_COLUMNS


def compacted(events: DataFrame) -> DataFrame:
    return (
        with_cluster(events)
        .withColumn("cluster", F.col("cid"))
        .withColumn("date", F.date_format(F.timestamp_seconds(F.col("ts")), "yyyy-MM-dd"))
        .select(*EVENT_COLUMNS, "cluster", "date")
        # Sorted runs of node and seq compress well and make the later per-node sort cheap.
        .sortWithinPartitions("cluster", "date", "node", "seq")
    )


def compact(spark: SparkSession, inp: Input, target: str) -> None:
    (
        compacted(inp.events)
        .write.mode("overwrite")
        .option("partitionOverwriteMode", "dynamic")
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
