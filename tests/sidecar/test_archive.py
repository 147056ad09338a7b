"""The history archive (`coordinated.sidecar.events.archive`) against a real S3-compatible server: the layout, write-once
uploads, resuming after a restart, and every fault the archive must ride out (a store that is stopped,
unreachable, refusing the credentials, answering 500 or slow), each healed afterwards."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from s3_faults import FaultProxy

from coordinated.s3.object_store import ObjectStore
from coordinated.sidecar.events.archive import SegmentArchive
from coordinated.sidecar.events.archive_settings import ArchiveSettings
from coordinated.sidecar.events.history import HistoryWriter
from coordinated.sidecar.events.history_segments import compress, compressed_segments
from coordinated.sidecar.node_settings import sidecar_registry
from coordinated.tools.s3server import S3Server, free_port

CLUSTER = "c0ffee"
NODE = "node-id-1"
WAIT_S = 30.0


def archive_settings(endpoint: str, credentials: Path, **client: str) -> ArchiveSettings:
    raw = {
        "node.name": "n1",
        "history.archive.type": "s3",
        "history.archive.s3.bucket": "archive",
        "history.archive.s3.base_path": "histories/prod",
        "s3.client.default.endpoint": endpoint,
        "s3.client.default.protocol": "http",
        "s3.client.default.path_style_access": "true",
        "s3.client.default.credentials_file": str(credentials),
        **{f"s3.client.default.{key}": value for key, value in client.items()},
    }
    settings = ArchiveSettings.from_settings(sidecar_registry().parse(raw))
    assert settings is not None
    return settings


def write_segments(writer: HistoryWriter, closed: int) -> None:
    """Events until `closed` more segments are closed (and compressed, as the node's maintenance does)."""
    target = len(compressed_segments(writer.directory)) + closed
    while len(compressed_segments(writer.directory)) < target:
        writer.append_fields({"cluster_uuid": CLUSTER, "node": NODE, "type": "term", "term": writer.last_seq})


class Harness:
    def __init__(self, settings: ArchiveSettings, history: Path, segment_size: int = 600) -> None:
        self.store = ObjectStore()
        self.archived: list[str] = []
        self.writer = HistoryWriter(history, segment_size, on_rotate=self._compress)
        self.archive = SegmentArchive(
            settings,
            self.store.bucket(settings.client, settings.bucket),
            NODE,
            lambda: CLUSTER,
            self.closed,
            lambda path, location: self.archived.append(location),
            max_backoff_s=0.3,
        )

    def closed(self) -> list[Path]:
        return compressed_segments(self.writer.directory)

    def _compress(self, path: Path) -> None:
        """What the node's history maintenance does with a closed segment, at once here."""
        self.archive.on_segment_closed(compress(path))

    async def until(self, what: str, done: Callable[[], bool]) -> None:
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while not done():
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"not within {WAIT_S}s: {what}; archive: {self.archive.status()}")
            await asyncio.sleep(0.05)


def run_archive(harness: Harness, scenario: Callable[[Harness], Awaitable[None]]) -> None:
    async def main() -> None:
        task = asyncio.get_running_loop().create_task(harness.archive.run())
        try:
            await scenario(harness)
        finally:
            task.cancel()
            await harness.store.close()
            harness.writer.close()

    asyncio.run(main())


def put_object(settings: ArchiveSettings, key: str, data: bytes) -> None:
    """Through the S3 API (the server ignores files put in its folder by hand when it checks If-None-Match)."""

    async def put() -> None:
        store = ObjectStore()
        try:
            await store.bucket(settings.client, settings.bucket).put_new(key, data)
        finally:
            await store.close()

    asyncio.run(put())


def bucket_keys(server: S3Server) -> dict[str, bytes]:
    root = server.root / "archive"
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("segment-*") if p.is_file()}


def test_closed_segments_are_archived_once_under_the_cluster_and_node(s3_server: S3Server, tmp_path: Path) -> None:
    settings = archive_settings(s3_server.address, s3_server.credentials_file(tmp_path / "credentials"))
    harness = Harness(settings, tmp_path / "history")

    async def scenario(h: Harness) -> None:
        write_segments(h.writer, 3)
        await h.until("3 segments archived", lambda: h.archive.status().pending_segments == 0 and len(h.archived) == 3)
        status = h.archive.status()
        assert (status.uploaded_segments, status.failures, status.problem) == (3, 0, None)
        assert all(h.archive.is_archived(path) for path in h.closed())
        assert h.writer.open_segment is not None
        assert not h.archive.is_archived(h.writer.open_segment.path), "the segment being written is never archived"
        first = h.closed()[0]
        head = await h.archive.bucket.head(h.archive.key_of(CLUSTER, first))
        assert head is not None and head.metadata == {"sha256": hashlib.sha256(first.read_bytes()).hexdigest()}

    run_archive(harness, scenario)
    stored = bucket_keys(s3_server)
    local = {f"histories/prod/{CLUSTER}/{NODE}/{p.name}": p.read_bytes() for p in harness.closed()}
    assert stored == local, "one object per closed segment, byte for byte, under BASE_PATH/CLUSTER_UUID/NODE_ID/"
    assert harness.archived == [f"s3://archive/{key}" for key in sorted(local)], "oldest first, each once"


def test_a_restarted_archive_uploads_only_what_the_bucket_lacks(s3_server: S3Server, tmp_path: Path) -> None:
    settings = archive_settings(s3_server.address, s3_server.credentials_file(tmp_path / "credentials"))
    first = Harness(settings, tmp_path / "history")

    async def two_segments(h: Harness) -> None:
        write_segments(h.writer, 2)
        await h.until("2 archived", lambda: len(h.archived) == 2)

    run_archive(first, two_segments)
    second = Harness(settings, tmp_path / "history")  # the node restarted: nothing in memory

    async def one_more(h: Harness) -> None:
        write_segments(h.writer, 1)
        await h.until("the new segment archived", lambda: h.archive.status().pending_segments == 0)
        assert h.archive.status().uploaded_segments == 1, "only the segment the bucket lacked was uploaded"

    run_archive(second, one_more)
    assert len(bucket_keys(s3_server)) == 3


def test_an_object_already_there_with_the_same_bytes_counts_as_archived(s3_server: S3Server, tmp_path: Path) -> None:
    """A put whose answer was lost is retried and finds its own object: archived, not an error."""
    settings = archive_settings(s3_server.address, s3_server.credentials_file(tmp_path / "credentials"))
    harness = Harness(settings, tmp_path / "history")
    write_segments(harness.writer, 1)
    (segment,) = harness.closed()
    put_object(settings, f"histories/prod/{CLUSTER}/{NODE}/{segment.name}", segment.read_bytes())
    harness.archive._listed_cluster = CLUSTER  # as if the listing had come before that put

    async def scenario(h: Harness) -> None:
        await h.until("archived", lambda: h.archive.is_archived(segment))
        assert h.archive.status().problem is None

    run_archive(harness, scenario)


def test_a_different_object_under_the_key_is_never_overwritten(s3_server: S3Server, tmp_path: Path) -> None:
    settings = archive_settings(s3_server.address, s3_server.credentials_file(tmp_path / "credentials"))
    harness = Harness(settings, tmp_path / "history")
    write_segments(harness.writer, 2)
    first, second = harness.closed()
    put_object(settings, f"histories/prod/{CLUSTER}/{NODE}/{first.name}", b"someone else's bytes\n")
    taken = s3_server.root / "archive" / "histories/prod" / CLUSTER / NODE / first.name
    harness.archive._listed_cluster = CLUSTER  # the object appears after the listing

    async def scenario(h: Harness) -> None:
        await h.until("the second segment archived", lambda: h.archive.is_archived(second))
        status = h.archive.status()
        assert not h.archive.is_archived(first), "retention must keep a segment the archive could not store"
        assert status.pending_segments == 1
        assert status.problem is not None and first.name in status.problem and "not overwritten" in status.problem

    run_archive(harness, scenario)
    assert taken.read_bytes() == b"someone else's bytes\n"
    assert len(bucket_keys(s3_server)) == 2


FAULTS = ("stopped", "wrong-port", "forbidden", "server-error", "slow")


@pytest.mark.parametrize("fault", FAULTS)
def test_uploads_ride_out_a_fault_and_resume_when_it_is_healed(
    fault: str, s3_server: S3Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    credentials = s3_server.credentials_file(tmp_path / "credentials")
    with FaultProxy(s3_server.endpoint, delay_s=3.0) as proxy:
        endpoint = {"wrong-port": f"127.0.0.1:{free_port()}", "server-error": proxy.address, "slow": proxy.address}
        client = {"max_retries": "1", "read_timeout": "1s"}
        settings = archive_settings(endpoint.get(fault, s3_server.address), credentials, **client)
        harness = Harness(settings, tmp_path / "history")
        expected = {
            "stopped": "cannot list s3://archive/",
            "wrong-port": "cannot list s3://archive/",
            "forbidden": "403",
            "server-error": "500 InternalError",
            "slow": "Read timeout",
        }[fault]

        def break_it() -> None:
            if fault == "stopped":
                s3_server.stop()
            elif fault == "forbidden":
                s3_server.credentials_file(credentials, secret_key="not-" + s3_server.secret_key)
            elif fault == "server-error":
                proxy.mode = "error"
            elif fault == "slow":
                proxy.mode = "slow"

        def heal(h: Harness) -> None:
            if fault == "stopped":
                s3_server.start()
            elif fault == "wrong-port":
                # The operator fixes the endpoint: the node restarts with the right one.
                h.archive.bucket = h.store.bucket(
                    archive_settings(s3_server.address, credentials, **client).client, "archive"
                )
            elif fault == "forbidden":
                s3_server.credentials_file(credentials)
            else:
                proxy.mode = "pass"

        async def scenario(h: Harness) -> None:
            break_it()
            write_segments(h.writer, 2)
            await h.until(f"the archive reports [{expected}]", lambda: expected in (h.archive.status().problem or ""))
            status = h.archive.status()
            assert status.pending_segments == 2 and status.pending_bytes > 0 and status.failures >= 1
            assert status.oldest_pending_age_s is not None
            write_segments(h.writer, 1)  # the writer goes on while the archive fails
            heal(h)
            await h.until("every segment archived", lambda: h.archive.status().pending_segments == 0)
            assert h.archive.status().problem is None, "a success clears the problem"

        run_archive(harness, scenario)
    assert len(bucket_keys(s3_server)) == 3
    for secret in (s3_server.secret_key, s3_server.access_key):
        assert secret not in caplog.text, "a credential reached the logs"


def test_an_upload_to_a_store_that_hangs_fails_at_its_deadline_and_resumes(s3_server: S3Server, tmp_path: Path) -> None:
    """A store stopped with SIGSTOP: the kernel still accepts connections and takes the request's bytes, and
    nothing answers or resets. botocore's read timeout (50s here, with 3 retries) would hold the upload for
    minutes; the request's deadline (`call_timeout`) fails it, and the failure shows, while the store hangs."""
    credentials = s3_server.credentials_file(tmp_path / "credentials")
    settings = archive_settings(s3_server.address, credentials, call_timeout="2s", read_timeout="50s", max_retries="3")
    harness = Harness(settings, tmp_path / "history")
    assert s3_server.process is not None

    async def scenario(h: Harness) -> None:
        write_segments(h.writer, 1)
        await h.until("the first segment archived", lambda: h.archive.status().pending_segments == 0)
        os.kill(s3_server.process.pid, signal.SIGSTOP)  # type: ignore[union-attr]
        try:
            write_segments(h.writer, 2)
            await h.until("the hung upload failed", lambda: "no answer within 2s" in (h.archive.status().problem or ""))
            status = h.archive.status()
            assert status.failures >= 1 and status.pending_segments == 2
            assert "s3.client.default.call_timeout" in (status.problem or "")
        finally:
            os.kill(s3_server.process.pid, signal.SIGCONT)  # type: ignore[union-attr]
        await h.until("every segment archived", lambda: h.archive.status().pending_segments == 0)
        assert h.archive.status().problem is None

    run_archive(harness, scenario)
    assert len(bucket_keys(s3_server)) == 3


def test_a_segment_damaged_on_disk_is_archived_as_it_is_and_marked_damaged(s3_server: S3Server, tmp_path: Path) -> None:
    """Left out, it would leave a hole in the archive that an audit reports as a gap; marked, the audit names it."""
    settings = archive_settings(s3_server.address, s3_server.credentials_file(tmp_path / "credentials"))
    harness = Harness(settings, tmp_path / "history")
    write_segments(harness.writer, 2)
    first, second = harness.closed()
    data = first.read_bytes()
    first.write_bytes(data[: len(data) // 2])

    async def scenario(h: Harness) -> None:
        await h.until("both archived", lambda: h.archive.status().pending_segments == 0)
        damaged = await h.archive.bucket.head(h.archive.key_of(CLUSTER, first))
        whole = await h.archive.bucket.head(h.archive.key_of(CLUSTER, second))
        assert damaged is not None and whole is not None
        assert (damaged.metadata or {}).get("damaged", "").startswith("truncated: the file ends after"), damaged
        assert "damaged" not in (whole.metadata or {})

    run_archive(harness, scenario)
