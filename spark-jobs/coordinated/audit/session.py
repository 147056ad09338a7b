"""The SparkSession: local mode by default, or whatever spark-submit configured."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
LOCAL_JAVA_OPTIONS = "-XX:+UseParallelGC"


def _local_cores(master: str) -> int | None:
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?", master)
    if not m:
        return None
    return os.cpu_count() or 2 if m.group(1) in (None, "*") else int(m.group(1))


def build_session(
    master: str | None = None, conf: Mapping[str, str] | None = None, app_name: str = "coordinated-audit"
) -> SparkSession:
    """A session for the audit.

    Under spark-submit (cluster mode on Kubernetes) the master comes from spark-submit and is only
    overridden when `master` is given; run directly, the default is local[*].
    """
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    # Python workers must run this interpreter, which can import the audit (used by --from-cluster).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master is None and not under_submit:
        master = DEFAULT_MASTER
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.adaptive.enabled": "true",
        # Compacted Parquet keeps the partition folders' values as strings (cluster UUIDs).
        "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
    }
    cores = _local_cores(master) if master else None
    if cores is not None:
        # The default of 200 shuffle partitions is far too many for one machine.
        settings["spark.sql.shuffle.partitions"] = str(max(4, 4 * cores))
        # No adaptive execution on one machine: it would coalesce the window's seq ranges into about one task per
        # core (they balance better as more), and it runs every shuffle of the twenty-odd small queries over the
        # state table as a job of its own, re-planned in between (25 jobs at 1M events instead of 19). The
        # audit's tests run without it too. On a cluster (spark-submit) it stays on.
        settings["spark.sql.adaptive.enabled"] = "false"
        # The audit's limits are caps that a valid history never reaches (suspect states, examples): the default
        # incremental take reads 1, then 4, then the remaining partitions, three jobs where one does.
        settings["spark.sql.limit.initialNumPartitions"] = "100000"
        settings["spark.ui.enabled"] = "false"
        # The parallel collector: the audit is a batch job, and on two cores G1's concurrent marking and write
        # barriers made a 10M-event audit 12 % slower (`python -m bench audit scale`). A JVM option, so it applies only
        # where this call starts the JVM (the CLI, the tests); `--conf spark.driver.extraJavaOptions=...`
        # replaces it.
        settings["spark.driver.extraJavaOptions"] = LOCAL_JAVA_OPTIONS
    settings.update(conf or {})
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
