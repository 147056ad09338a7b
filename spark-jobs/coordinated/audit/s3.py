"""Auditing the history archive in object storage: `coordinated audit s3://BUCKET/PREFIX`.

The archive holds one object per closed segment, `PREFIX/CLUSTER_UUID/NODE_ID/segment-N.jsonl[.zst]` (see the
sidecar's `coordinated.sidecar.events.archive`). The driver lists the segment objects under the prefix with the
S3 client the sidecar's archive uses too (`coordinated.s3.object_store`), so that nothing else in the bucket, such as an audit
checkpoint, is read as history; Spark reads them through Hadoop's `s3a://` file system, from the driver and every
executor alike.

Where the service is and how to sign requests comes from the command line or the standard AWS environment
(`AWS_ENDPOINT_URL_S3`, `AWS_REGION`, `AWS_SHARED_CREDENTIALS_FILE`, `AWS_ACCESS_KEY_ID`...,
`AWS_WEB_IDENTITY_TOKEN_FILE`); credentials are never Spark settings: s3a's credential providers read the same
environment and file (on Kubernetes, executors need them in their pods too).

Before the audit, every object the archive wrote is checked against the SHA-256 it recorded in the object's
metadata (`x-amz-meta-sha256`), in one Spark job (`binaryFile` and `sha2`, on the executors): a damaged or
truncated object is unusable input naming its key (exit 2), never a history with holes; so is an object the
archive marked damaged (`x-amz-meta-damaged`: the segment was damaged on the node's disk before it went), and
every compressed object is read through the frame check (`history_frames`) like a local segment.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlparse

from coordinated.audit.reading import KnownTails, UnusableInput
from coordinated.coordination.history_lines import NEWLINE
from coordinated.s3.object_store import Bucket, ObjectMissing, ObjectStore, ObjectStoreError
from coordinated.s3.s3_settings import S3ClientSettings

if TYPE_CHECKING:
    from pyspark.sql import Row, SparkSession

T = TypeVar("T")

SCHEMES = ("s3://", "s3a://")
SEGMENT_OBJECT = re.compile(r"(?:^|/)segment-(\d+)\.jsonl(?:\.zst)?$")
SHA256_METADATA = "sha256"  # the sidecar archive's `x-amz-meta-sha256`
DAMAGED_METADATA = "damaged"  # its `x-amz-meta-damaged`: the segment was damaged on the node's disk already
HEADS_AT_ONCE = 16
TAIL_BYTES = 1 << 20  # as much of an object's end as the reader looks at for a crash-cut line
# Tried in order by s3a: Spark-level keys if a user gave them, then the standard AWS sources.
CREDENTIAL_PROVIDERS = ",".join(
    (
        "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider",
        "software.amazon.awssdk.auth.credentials.WebIdentityTokenFileCredentialsProvider",
        "software.amazon.awssdk.auth.credentials.ProfileCredentialsProvider",
        "org.apache.hadoop.fs.s3a.auth.IAMInstanceCredentialsProvider",
    )
)
# Where scripts/fetch-s3a-jars.sh caches hadoop-aws and its AWS SDK modules; the image has them in pyspark's jars.
JARS_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "coordinated-cluster" / "s3a-jars"


def is_s3(path: str) -> bool:
    return path.startswith(SCHEMES)


def split_uri(uri: str) -> tuple[str, str]:
    """(bucket, key prefix) of an `s3://` or `s3a://` URI."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("s3", "s3a") or not parsed.netloc:
        raise UnusableInput(f"[{uri}] is not an s3://BUCKET/PREFIX URI")
    return parsed.netloc, parsed.path.lstrip("/")


@dataclass(frozen=True)
class S3Access:
    """How to reach the object store: from options, else the standard AWS environment."""

    endpoint_url: str | None
    region: str
    path_style_access: bool
    credentials_file: str | None = None

    @classmethod
    def resolve(
        cls,
        endpoint: str | None = None,
        region: str | None = None,
        path_style_access: bool | None = None,
        credentials_file: str | None = None,
        environ: Mapping[str, str] = os.environ,
    ) -> S3Access:
        endpoint = endpoint or environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL") or None
        if endpoint is not None and "://" not in endpoint:
            raise UnusableInput(f"the S3 endpoint [{endpoint}] must be an http:// or https:// URL")
        return cls(
            endpoint_url=endpoint.rstrip("/") if endpoint else None,
            region=region or environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or "us-east-1",
            # A custom endpoint (an S3-compatible service) is addressed path-style unless told otherwise.
            path_style_access=endpoint is not None if path_style_access is None else path_style_access,
            credentials_file=credentials_file or environ.get("AWS_SHARED_CREDENTIALS_FILE"),
        )

    def export_credentials_file(self) -> None:
        """botocore here and the AWS SDK in the JVM (started after this) both read AWS_SHARED_CREDENTIALS_FILE."""
        if self.credentials_file:
            os.environ["AWS_SHARED_CREDENTIALS_FILE"] = self.credentials_file

    def hadoop_conf(self) -> dict[str, str]:
        """s3a's settings for this store; no credential is among them."""
        conf = {
            "fs.s3a.endpoint.region": self.region,
            "fs.s3a.path.style.access": str(self.path_style_access).lower(),
            "fs.s3a.aws.credentials.provider": CREDENTIAL_PROVIDERS,
        }
        if self.endpoint_url is not None:
            conf["fs.s3a.endpoint"] = self.endpoint_url
            conf["fs.s3a.connection.ssl.enabled"] = str(self.endpoint_url.startswith("https")).lower()
        return conf

    def spark_conf(self) -> dict[str, str]:
        """The Spark settings for a session that reads this store: s3a's, and its jars where they are needed."""
        conf = {f"spark.hadoop.{key}": value for key, value in self.hadoop_conf().items()}
        if self.credentials_file:
            # Executors started by Spark on Kubernetes get this variable too (the file must be mounted there).
            conf["spark.executorEnv.AWS_SHARED_CREDENTIALS_FILE"] = self.credentials_file
        jars = s3a_jars()
        if jars:
            conf["spark.jars"] = ",".join(jars)
        return conf

    def client_settings(self) -> S3ClientSettings:
        return S3ClientSettings(
            name="audit",
            endpoint_url=self.endpoint_url,
            region=self.region,
            path_style_access=self.path_style_access,
            credentials_file=self.credentials_file,
            read_timeout_s=50.0,
            max_retries=3,
            call_timeout_s=60.0,
        )

    def run(self, bucket: str, operation: Callable[[Bucket], Awaitable[T]]) -> T:
        """Run S3 requests against `bucket` from synchronous code; failures are unusable input."""

        async def main() -> T:
            store = ObjectStore("audit-s3")
            try:
                return await operation(store.bucket(self.client_settings(), bucket))
            finally:
                await store.close()

        try:
            return asyncio.run(main())
        except ObjectStoreError as error:
            raise UnusableInput(error.reason) from None


def spark_jars_folder() -> Path:
    """The jars folder of the Spark that runs: $SPARK_HOME's (under spark-submit, pyspark itself is imported from
    a zip in it), else the installed pyspark's."""
    home = os.environ.get("SPARK_HOME")
    if home:
        return Path(home) / "jars"
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def s3a_jars() -> list[str]:
    """The jars to add for s3a://, or none when Spark's own jars folder has them (the image)."""
    if any(spark_jars_folder().glob("hadoop-aws-*.jar")):
        return []
    override = os.environ.get("COORDINATED_S3A_JARS")
    folders = [Path(override)] if override else sorted(JARS_CACHE.glob("hadoop-*"), key=lambda p: p.stat().st_mtime)
    for folder in reversed(folders):
        jars = sorted(str(jar) for jar in folder.glob("*.jar"))
        if any("hadoop-aws-" in jar for jar in jars):
            return jars
    raise UnusableInput(
        "reading s3:// needs hadoop-aws and the AWS SDK jars: run scripts/fetch-s3a-jars.sh, or point "
        "COORDINATED_S3A_JARS at a folder that holds them"
    )


@dataclass(frozen=True)
class SegmentObject:
    """One archived segment: where Spark reads it, and what the listing said."""

    bucket: str
    key: str
    size: int

    @property
    def uri(self) -> str:
        return f"s3a://{self.bucket}/{self.key}"

    @property
    def folder(self) -> str:
        """The node's folder, `PREFIX/CLUSTER_UUID/NODE_ID`, which the audit treats as one history."""
        return self.uri.rsplit("/", 1)[0]

    @property
    def node(self) -> tuple[str, str]:
        """(cluster UUID, node id), from the archive's layout `.../CLUSTER_UUID/NODE_ID/segment-N...`."""
        parts = self.key.split("/")
        return (parts[-3] if len(parts) >= 3 else "", parts[-2] if len(parts) >= 2 else "")

    @property
    def first_seq(self) -> int:
        match = SEGMENT_OBJECT.search(self.key)
        assert match is not None
        return int(match.group(1))


def list_segments(access: S3Access, uri: str) -> list[SegmentObject]:
    """Every segment object under `uri`, by folder and first seq."""
    bucket, prefix = split_uri(uri)
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    listed = access.run(bucket, lambda b: b.list(prefix))
    found = [SegmentObject(bucket, info.key, info.size) for info in listed if SEGMENT_OBJECT.search(info.key)]
    return sorted(found, key=lambda s: (s.folder, s.first_seq))


def inspect_segments(spark: SparkSession, access: S3Access, segments: Sequence[SegmentObject]) -> KnownTails:
    """One Spark job over the objects (`binaryFile`, on the executors): each is checked against the SHA-256 the
    archive recorded (objects copied in by other tools, without it, are read unchecked), and the crash-cut last
    line of each uncompressed one is found, so that the reader need not fetch each object's end again. Raises
    UnusableInput naming the damaged objects."""
    from pyspark.sql import functions as F

    recorded, marked = _recorded_digests(access, segments)
    if marked:
        named = [f"s3://{uri.removeprefix('s3a://')} ({why})" for uri, why in sorted(marked.items())]
        more = f" and {len(named) - 5} more" if len(named) > 5 else ""
        raise UnusableInput(
            f"archive object of a segment damaged on its node before it was archived: {'; '.join(named[:5])}{more}"
        )
    content, cut = F.col("content"), F.expr("length(content) > 0 and substring(content, -1, 1) != X'0A'")
    rows = (
        spark.read.format("binaryFile")
        .load([segment.uri for segment in segments])
        .select(
            "path",
            "length",
            F.sha2(content, 256).alias("sha256"),
            F.when(cut, F.size(F.split(content.cast("string"), "\n"))).alias("line"),
            F.when(
                cut, F.expr(f"substring(content, greatest(1, length(content) - {TAIL_BYTES - 1}), {TAIL_BYTES})")
            ).alias("tail"),
        )
        .collect()
    )
    actual = {row["path"]: row for row in rows}
    damaged = [
        f"s3://{uri.removeprefix('s3a://')} ({_why(digest, actual.get(uri))})"
        for uri, digest in sorted(recorded.items())
        if digest and (uri not in actual or actual[uri]["sha256"] != digest)
    ]
    if damaged:
        more = f" and {len(damaged) - 5} more" if len(damaged) > 5 else ""
        raise UnusableInput(f"damaged or truncated archive object: {'; '.join(damaged[:5])}{more}")
    tails: dict[str, tuple[int | None, bytes] | None] = {}
    for uri, row in actual.items():
        if uri.endswith(".zst") or row["tail"] is None:
            tails[uri] = None  # complete, or compressed (a bad last line there is a malformed line)
        else:
            tail = bytes(row["tail"])
            tails[uri] = (int(row["line"]), tail[tail.rindex(NEWLINE) + 1 :] if NEWLINE in tail else tail)
    return tails


def _recorded_digests(
    access: S3Access, segments: Sequence[SegmentObject]
) -> tuple[dict[str, str | None], dict[str, str]]:
    """The SHA-256 the archive recorded for each object (`x-amz-meta-sha256`), by URI, and what was wrong with
    those it marked damaged (`x-amz-meta-damaged`); HEADs, a few at once."""
    by_bucket: dict[str, list[SegmentObject]] = {}
    for segment in segments:
        by_bucket.setdefault(segment.bucket, []).append(segment)
    recorded: dict[str, str | None] = {}
    marked: dict[str, str] = {}
    for bucket, members in by_bucket.items():

        async def heads(b: Bucket, members: list[SegmentObject] = members) -> list[dict[str, str]]:
            limit = asyncio.Semaphore(HEADS_AT_ONCE)

            async def metadata(segment: SegmentObject) -> dict[str, str]:
                async with limit:
                    info = await b.head(segment.key)
                if info is None:
                    raise ObjectMissing(f"cannot read s3://{segment.bucket}/{segment.key}: it is gone")
                return info.metadata or {}

            return await asyncio.gather(*(metadata(segment) for segment in members))

        for segment, found in zip(members, access.run(bucket, heads), strict=True):
            recorded[segment.uri] = found.get(SHA256_METADATA)
            if DAMAGED_METADATA in found:
                marked[segment.uri] = found[DAMAGED_METADATA]
    return recorded, marked


def _why(recorded: str, actual: Row | None) -> str:
    if actual is None:
        return "it could not be read"
    return (
        f"{actual['length']} bytes whose SHA-256 is {actual['sha256'][:12]}..., not the {recorded[:12]}... "
        "the archive recorded"
    )


def read_object(access: S3Access, uri: str) -> bytes | None:
    """An object's bytes, or None if there is none (for a checkpoint kept in the bucket)."""
    bucket, key = split_uri(uri)

    async def get(b: Bucket) -> bytes | None:
        try:
            return await b.get(key)
        except ObjectMissing:
            return None

    return access.run(bucket, get)


def read_checkpoint(access: S3Access, uri: str, parse: Callable[[str, str], T]) -> T | None:
    """An incremental audit's checkpoint kept in the bucket (`--checkpoint s3://...`), None before the first."""
    data = read_object(access, uri)
    return None if data is None else parse(data.decode("utf-8", errors="replace"), uri)


def write_object(access: S3Access, uri: str, data: bytes) -> None:
    bucket, key = split_uri(uri)
    access.run(bucket, lambda b: b.put(key, data))


def expand(
    spark: SparkSession,
    access: S3Access,
    paths: Iterable[str],
    select: Callable[[list[str]], list[str]] | None = None,
) -> tuple[list[str], KnownTails]:
    """The paths to read, each `s3://` prefix replaced by its verified segment objects (those `select` keeps: an
    incremental audit's, so that older objects are neither fetched nor checked), and the crash-cut last lines of
    those objects."""
    # A session that existed before (a notebook's, a test run's) took neither the spark.hadoop.* settings nor the
    # environment: set both in its JVM (the AWS SDK reads the system property before the variable).
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in access.hadoop_conf().items():
        hadoop.set(key, value)
    jvm = spark.sparkContext._jvm
    if access.credentials_file and jvm is not None:
        jvm.java.lang.System.setProperty("aws.sharedCredentialsFile", access.credentials_file)
    expanded: list[str] = []
    tails: dict[str, tuple[int | None, bytes] | None] = {}
    for path in paths:
        if not is_s3(path):
            expanded.append(path)
            continue
        segments = list_segments(access, path)
        if not segments:
            raise UnusableInput(f"no archived history segments under {path}")
        if select is not None:
            kept = set(select([segment.uri for segment in segments]))
            segments = [segment for segment in segments if segment.uri in kept]
            if not segments:
                continue
        tails.update(inspect_segments(spark, access, segments))
        expanded.extend(segment.uri for segment in segments)
    return expanded, tails
