"""The SparkSession: local mode by default, or whatever spark-submit configured."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"


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
        # Coalescing would merge them into about one per core; the window's seq ranges balance better as more.
        settings["spark.sql.adaptive.coalescePartitions.enabled"] = "false"
        settings["spark.ui.enabled"] = "false"
    settings.update(conf or {})
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
