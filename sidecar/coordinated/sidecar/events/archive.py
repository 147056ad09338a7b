"""The history archive: every closed history segment, uploaded once to object storage.

Each closed segment becomes one object, `BASE_PATH/CLUSTER_UUID/NODE_ID/<segment file name>`, written once with
`If-None-Match: *` and never modified. The cluster UUID is the one the node belongs to when it uploads (a node
that has not joined a cluster yet waits). Uploads run in a task of their own, oldest segment first: the history
writer only tells the archive that a segment closed (`on_segment_closed`), and every S3 request runs on the
object store's own thread, so a slow, failing or unreachable store never holds up a write or an election.

- Verifiable: each object carries the SHA-256 of its bytes as user metadata (`x-amz-meta-sha256`), which the audit
  checks, so that a damaged or truncated object is named as such instead of read as a history with holes.
- Checked before it goes: each segment's zstd frames are read to their end and their checksum
  (`history_frames`). A segment damaged on the node's disk is uploaded as it is (it is the node's history: left
  out, the archive would show a hole the audit reports as a gap), with what is wrong in `x-amz-meta-damaged`, so
  the audit names it as unusable input without reading it; the node's health names it too (`history_problem`).
- Idempotent: a put that finds the key taken (a retry whose answer was lost) compares sizes; equal means
  archived. A different object under that key is never overwritten: the segment stays local and health says why.
- Resumed: on start (and when the node's cluster changes) the archive lists what the bucket already has under
  the node's prefix, so a restart uploads only what is missing.
- Retried: a failed pass waits with exponential backoff and jitter (tenacity) and starts again, forever; the
  failure shows in health (`archive_problem`, status yellow) and in metrics until a pass succeeds.

`is_archived(path)` tells retention which local segments object storage already holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential_jitter

from coordinated.coordination.history_frames import DamagedSegment, decompress_checked
from coordinated.s3.object_store import Bucket, ObjectExists, ObjectStoreError
from coordinated.sidecar.events.archive_settings import ArchiveSettings

log = logging.getLogger("coordinated.archive")

# The user metadata key (`x-amz-meta-sha256`) with the hex SHA-256 of an archived segment's bytes.
SHA256_METADATA = "sha256"
# The user metadata key (`x-amz-meta-damaged`) of a segment that was damaged on the node's disk: what is wrong.
DAMAGED_METADATA = "damaged"
MAX_DAMAGE_TEXT = 200  # characters of it (user metadata is at most 2 KB, and ASCII)
INITIAL_BACKOFF_S = 1.0
MAX_BACKOFF_S = 60.0
# While the node knows no cluster UUID yet (or nothing is pending), look again this often.
IDLE_CHECK_S = 5.0


@dataclass(frozen=True)
class ArchiveStatus:
    """What metrics and health report about the archive."""

    pending_segments: int  # closed segments not archived yet
    pending_bytes: int
    oldest_pending_age_s: float | None  # since the oldest pending segment was last written
    uploaded_segments: int  # by this process
    uploaded_bytes: int
    failures: int  # failed passes (each one retried)
    last_success_time: float | None  # wall clock
    problem: str | None  # why the archive is failing or stuck, for health


def object_prefix(base_path: str, cluster_uuid: str, node_id: str) -> str:
    return "/".join(part for part in (base_path, cluster_uuid, node_id) if part) + "/"


class SegmentArchive:
    def __init__(
        self,
        settings: ArchiveSettings,
        bucket: Bucket,
        node_id: str,
        cluster_uuid: Callable[[], str | None],
        closed_segments: Callable[[], list[Path]],
        on_archived: Callable[[Path, str], None],
        *,
        max_backoff_s: float = MAX_BACKOFF_S,
    ) -> None:
        """`cluster_uuid()` is None while the node has joined no cluster; `closed_segments()` lists the segments
        the writer has closed, oldest first; `on_archived(path, uri)` is called on the archive's loop after each
        upload (the node records it in its history)."""
        self.settings = settings
        self.bucket = bucket
        self.node_id = node_id
        self.cluster_uuid = cluster_uuid
        self.closed_segments = closed_segments
        self.on_archived = on_archived
        self.max_backoff_s = max_backoff_s
        self._archived: set[str] = set()  # segment file names the bucket holds
        self._listed_cluster: str | None = None  # the cluster whose prefix was listed
        self._conflicts: dict[str, str] = {}  # segment name -> why it cannot be archived
        self._wake = asyncio.Event()
        self._wake.set()
        self._uploaded_segments = 0
        self._uploaded_bytes = 0
        self._failures = 0
        self._last_error: str | None = None
        self._last_success: float | None = None

    # -- for the writer, retention and the node ------------------------------------------------------------

    def on_segment_closed(self, path: Path) -> None:
        """Called by the history writer: only wakes the upload task."""
        self._wake.set()

    def is_archived(self, path: Path) -> bool:
        return path.name in self._archived

    def key_of(self, cluster_uuid: str, path: Path) -> str:
        return object_prefix(self.settings.base_path, cluster_uuid, self.node_id) + path.name

    def status(self) -> ArchiveStatus:
        pending = [path for path in self._closed() if path.name not in self._archived]
        sizes, ages = [], []
        now = time.time()
        for path in pending:
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            sizes.append(stat.st_size)
            ages.append(now - stat.st_mtime)
        problem = self._last_error
        if self._conflicts:
            stuck = "; ".join(self._conflicts.values())
            problem = f"{problem}; {stuck}" if problem else stuck
        return ArchiveStatus(
            pending_segments=len(sizes),
            pending_bytes=sum(sizes),
            oldest_pending_age_s=max(ages) if ages else None,
            uploaded_segments=self._uploaded_segments,
            uploaded_bytes=self._uploaded_bytes,
            failures=self._failures,
            last_success_time=self._last_success,
            problem=problem,
        )

    async def flush(self, timeout_s: float) -> bool:
        """Wait until every closed segment is archived (the upload task must be running); False on timeout."""
        self._wake.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.status().pending_segments > 0:
            if loop.time() >= deadline or self.cluster_uuid() is None:
                return False
            await asyncio.sleep(0.05)
        return True

    # -- the upload task -----------------------------------------------------------------------------------

    async def run(self) -> None:
        """Upload closed segments until cancelled."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), IDLE_CHECK_S)
            self._wake.clear()
            async for attempt in AsyncRetrying(
                retry=retry_if_exception_type(ObjectStoreError),
                wait=wait_exponential_jitter(initial=INITIAL_BACKOFF_S, max=self.max_backoff_s),
                before_sleep=self._on_failure,
                reraise=True,
            ):
                with attempt:
                    await self._archive_pending()

    def _closed(self) -> list[Path]:
        try:
            return self.closed_segments()
        except OSError:
            return []

    async def _archive_pending(self) -> None:
        """One pass: list the bucket once per cluster, then upload every closed segment it lacks, oldest first."""
        cluster = self.cluster_uuid()
        if cluster is None:
            return
        if cluster != self._listed_cluster:
            listed = await self.bucket.list(object_prefix(self.settings.base_path, cluster, self.node_id))
            self._archived = {info.key.rsplit("/", 1)[-1] for info in listed}
            self._listed_cluster = cluster
            self._conflicts.clear()
        for path in self._closed():
            if path.name in self._archived or path.name in self._conflicts:
                continue
            try:
                data = await asyncio.to_thread(path.read_bytes)
            except FileNotFoundError:
                continue  # removed meanwhile (a retention that does not wait for the archive)
            key = self.key_of(cluster, path)
            metadata = {SHA256_METADATA: hashlib.sha256(data).hexdigest()}
            damage = await asyncio.to_thread(_damage, data)
            if damage:
                log.error("history archive: %s is %s; uploading it as it is, marked damaged", path, damage)
                metadata[DAMAGED_METADATA] = damage.encode("ascii", "replace").decode()[:MAX_DAMAGE_TEXT]
            try:
                await self.bucket.put_new(key, data, metadata)
            except ObjectExists:
                existing = await self.bucket.head(key)
                if existing is None or existing.size != len(data):
                    found = "nothing" if existing is None else f"{existing.size} bytes"
                    self._conflicts[path.name] = (
                        f"{self.bucket.uri(key)} already exists with {found} but {path} has {len(data)}: "
                        "not overwritten, so that segment stays local"
                    )
                    log.error("history archive: %s", self._conflicts[path.name])
                    continue
            self._archived.add(path.name)
            self._uploaded_segments += 1
            self._uploaded_bytes += len(data)
            self.on_archived(path, self.bucket.uri(key))
        if self._last_error is not None:
            log.info("history archive: uploads to %s work again", self.bucket.uri())
        self._last_error = None
        self._last_success = time.time()

    def _on_failure(self, state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        reason = getattr(error, "reason", None) or str(error)
        self._failures += 1
        if reason != self._last_error:
            log.warning("history archive: %s (retrying with backoff)", reason)
        self._last_error = reason


def _damage(data: bytes) -> str:
    """'' when a compressed segment's bytes are whole, else what is wrong with them."""
    try:
        decompress_checked(data)
    except DamagedSegment as error:
        return str(error)
    return ""
