"""`--from-cluster`: fetch the sidecars' histories (`GET /_history?after_seq=N`) through Spark.

The URL list is parallelized with one URL per partition, so each executor task pages through one
sidecar's history and streams its lines into Spark; no single process holds all histories.

With tokens on, `/_history` needs a reader token (sent as `Authorization: Bearer`); with TLS on, the
sidecars' certificates are checked against the cluster's CA. Both are read once on the driver and shipped
to the tasks with the URLs, so executors need neither the files nor the environment.
"""

from __future__ import annotations

import os
import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

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


TOKEN_ENV = "COORDINATED_TOKEN"


@dataclass(frozen=True)
class FetchAuth:
    """How to reach secured sidecars: a bearer token, and the CA certificates (PEM) to trust for HTTPS."""

    token: str | None = field(default=None, repr=False)  # never in logs or error messages
    ca_pem: str | None = None  # None: the system's trust store

    @classmethod
    def resolve(cls, token_file: Path | None = None, ca_file: Path | None = None) -> FetchAuth:
        """The token from `token_file`, else from $COORDINATED_TOKEN; the CA from `ca_file`, else from
        $SSL_CERT_FILE (read here, on the driver: Spark's Python workers may not share its environment).

        Raises UnusableInput naming the file when one cannot be read or is empty."""
        if ca_file is None and os.environ.get("SSL_CERT_FILE"):
            ca_file = Path(os.environ["SSL_CERT_FILE"])
        token = os.environ.get(TOKEN_ENV) or None
        if token_file is not None:
            token = _read(token_file, "token file").strip()
            if not token:
                raise UnusableInput(f"the token file {token_file} is empty")
        ca_pem = None
        if ca_file is not None:
            ca_pem = _read(ca_file, "CA file")
            if "-----BEGIN CERTIFICATE-----" not in ca_pem:
                raise UnusableInput(f"the CA file {ca_file} holds no PEM certificate")
        return cls(token.strip() if token else None, ca_pem)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def context(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cadata=self.ca_pem) if self.ca_pem is not None else None


NO_AUTH = FetchAuth()


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise UnusableInput(f"cannot read the {what} {path}: {e}") from None


def _explain(error: Exception) -> str:
    """What to do about a refused fetch, beside the error itself."""
    if isinstance(error, urllib.error.HTTPError) and error.code == 401:
        return f" (the sidecar needs a reader token: --token-file or ${TOKEN_ENV}; or the token is wrong)"
    if isinstance(error, urllib.error.HTTPError) and error.code == 403:
        return " (the token's role may not read /_history: use a reader, writer or admin token)"
    reason = getattr(error, "reason", error)
    if isinstance(reason, ssl.SSLCertVerificationError):
        return " (trust the cluster's CA: --ca-file, or SSL_CERT_FILE)"
    return ""


def history_url(base: str, after_seq: int) -> str:
    return f"{base.rstrip('/')}/_history?after_seq={after_seq}"


def fetch_one(
    base: str, auth: FetchAuth = NO_AUTH, timeout: float = 30.0
) -> Iterator[tuple[str | None, str, int, str | None]]:
    """(line, source, line number, error) for one sidecar, paging by the last seq seen."""
    after, number = 0, 0
    context = auth.context()
    for _ in range(MAX_PAGES):
        newest = after
        request = urllib.request.Request(history_url(base, after), headers=auth.headers())
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
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
            yield None, base, number, f"cannot fetch {history_url(base, after)}: {e}{_explain(e)}"
            return
        if newest <= after:
            return
        after = newest


def fetch_lines(spark: SparkSession, urls: Sequence[str], auth: FetchAuth = NO_AUTH) -> DataFrame:
    """The lines of every sidecar's history: `value`, `_source` (the URL), `_line`, `_error`."""

    def fetch_partition(part: Iterable[str]) -> Iterator[tuple[str | None, str, int, str | None]]:
        for url in part:
            yield from fetch_one(url, auth)

    rdd = spark.sparkContext.parallelize(list(urls), max(1, len(urls))).mapPartitions(fetch_partition)
    # Kept: the checks read the lines more than once, and fetching again would be slow and might differ.
    return spark.createDataFrame(rdd, LINES_SCHEMA).persist(StorageLevel.MEMORY_AND_DISK)


def load_from_cluster(
    spark: SparkSession, urls: Sequence[str], *, skip_malformed: bool, auth: FetchAuth = NO_AUTH
) -> Input:
    lines = fetch_lines(spark, urls, auth)
    errors = lines.filter(F.col("_error").isNotNull()).limit(5).collect()
    if errors:
        lines.unpersist()
        raise UnusableInput("; ".join(r["_error"] for r in errors))
    result = parse_lines(lines.drop("_error"), skip_malformed=skip_malformed)
    result.persisted.append(lines)
    return result
