"""`--from-cluster`: fetch the sidecars' histories (`GET /_history?after_seq=N`) through Spark.

The URL list is parallelized with one URL per partition, so each executor task pages through one
sidecar's history and streams its lines into Spark; no single process holds all histories.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Sequence

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from coordinated.audit.reading import Input, UnusableInput, parse_lines

_SEQ = re.compile(rb'"seq"\s*:\s*(\d+)')
MAX_PAGES = 1_000_000  # a server that never stops paging is a bug; do not loop forever

LINES_SCHEMA = T.StructType(
    [
        T.StructField("value", T.StringType()),
        T.StructField("_source", T.StringType()),
        T.StructField("_line", T.LongType()),
        T.StructField("_error", T.StringType()),
    ]
)


def history_url(base: str, after_seq: int) -> str:
    return f"{base.rstrip('/')}/_history?after_seq={after_seq}"


def fetch_one(base: str, timeout: float = 30.0) -> Iterator[tuple[str | None, str, int, str | None]]:
    """(line, source, line number, error) for one sidecar, paging by the last seq seen."""
    after, number = 0, 0
    for _ in range(MAX_PAGES):
        newest = after
        try:
            with urllib.request.urlopen(history_url(base, after), timeout=timeout) as resp:
                for raw in resp:
                    m = _SEQ.search(raw)
                    seq = int(m.group(1)) if m else None
                    if seq is not None and seq <= after:
                        continue  # a server that ignores after_seq: do not count lines twice
                    number += 1
                    yield raw.decode("utf-8", errors="replace").rstrip("\r\n"), base, number, None
                    if seq is not None:
                        newest = max(newest, seq)
        except (urllib.error.URLError, OSError, ValueError) as e:
            yield None, base, number, f"cannot fetch {history_url(base, after)}: {e}"
            return
        if newest <= after:
            return
        after = newest


def _fetch_partition(urls: Iterable[str]) -> Iterator[tuple[str | None, str, int, str | None]]:
    for url in urls:
        yield from fetch_one(url)


def fetch_lines(spark: SparkSession, urls: Sequence[str]) -> DataFrame:
    """The lines of every sidecar's history: `value`, `_source` (the URL), `_line`, `_error`."""
    rdd = spark.sparkContext.parallelize(list(urls), max(1, len(urls))).mapPartitions(_fetch_partition)
    # Kept: the checks read the lines more than once, and fetching again would be slow and might differ.
    return spark.createDataFrame(rdd, LINES_SCHEMA).persist(StorageLevel.MEMORY_AND_DISK)


def load_from_cluster(spark: SparkSession, urls: Sequence[str], *, skip_malformed: bool) -> Input:
    lines = fetch_lines(spark, urls)
    errors = lines.filter(F.col("_error").isNotNull()).limit(5).collect()
    if errors:
        lines.unpersist()
        raise UnusableInput("; ".join(r["_error"] for r in errors))
    result = parse_lines(lines.drop("_error"), skip_malformed=skip_malformed)
    result.persisted.append(lines)
    return result
