"""`coordinated audit s3://BUCKET/PREFIX`: the history archive of a cluster of real nodes, read back from a real
S3-compatible server through Spark's s3a://; damaged and truncated objects are named (exit 2), never reported
as violations; only segment objects are read; the listing an incremental audit needs."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import zstandard
from pyspark.sql import SparkSession

from coordinated.audit.cli import main
from coordinated.audit.s3 import (
    S3Access,
    read_object,
    s3a_jars,
    write_object,
)
from coordinated.sidecar.events.history_segments import expanded_lines
from coordinated.tools.localcluster import FAST_SETTINGS, LocalCluster
from coordinated.tools.s3server import S3Server

pytestmark = pytest.mark.timeout(600)


@dataclass
class Archive:
    server: S3Server
    credentials: Path
    events: int  # in the archived objects
    nodes: int

    def args(self, bucket: str, report_dir: Path) -> list[str]:
        return [
            f"s3://{bucket}/prod",
            "--s3-endpoint", self.server.endpoint,
            "--s3-credentials-file", str(self.credentials),
            "--report-dir", str(report_dir),
            "--no-html",
        ]  # fmt: skip

    def copy(self, bucket: str) -> Path:
        """A copy of the archive in another bucket (a fresh name, as Hadoop caches a file system per bucket); the
        posix backend keeps each object's metadata in extended attributes, which the copy keeps."""
        target = self.server.root / bucket
        shutil.copytree(self.server.root / "archive", target)
        return target


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory, s3_server_binary: Path) -> Iterator[Archive]:
    """Three nodes archive their closed segments (4 kb each) while taking writes; then they stop."""
    s3a_jars()  # raises, naming scripts/fetch-s3a-jars.sh, when the jars are missing
    work = tmp_path_factory.mktemp("archive")
    with S3Server(s3_server_binary, work / "s3") as server:
        server.create_bucket("archive")
        credentials = server.credentials_file(work / "credentials")
        settings = {
            **FAST_SETTINGS,
            "history.segment_size": "4kb",
            "history.archive.type": "s3",
            "history.archive.s3.bucket": "archive",
            "history.archive.s3.base_path": "prod",
            "s3.client.default.endpoint": server.endpoint,
            "s3.client.default.path_style_access": "true",
            "s3.client.default.credentials_file": str(credentials),
        }
        cluster = LocalCluster(work / "cluster", settings=settings)
        try:
            nodes = cluster.bootstrap(3)
            for i in range(60):
                assert nodes[i % 3].put(f"/_cluster/metadata/k{i}", {"i": i})[0] == 200
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and any(
                len(sorted((n.data_dir / "history").glob("segment-*"))) - 1 > archived_count(server, n.node_id())
                for n in nodes
            ):
                time.sleep(0.2)
            # One at a time, the master last, each given the time to archive its last segment: left alone, the
            # master publishes the last follower's departure, which only it accepts, and stops with it open.
            master = nodes[0].get("/_cluster/health")[1]["master_node"]
            for node in sorted(nodes, key=lambda n: n.node_id() == master):
                assert cluster.stop(node, timeout=30) == 0
                time.sleep(2)  # for the master to see the departure and publish it
        finally:
            cluster.stop_all()
        objects = sorted((server.root / "archive").rglob("segment-*"))
        events = sum(len(object_events(p)) for p in objects)
        assert events > 0 and all(archived_count(server, n.node_id()) >= 3 for n in nodes)
        yield Archive(server, credentials, events, len(nodes))


def object_events(path: Path) -> list[dict[str, Any]]:
    """The events of one archived object (a compressed segment, format 2) as format-1 events."""
    return [event for line in expanded_lines(path) for event in line.events or ()]


def archived_count(server: S3Server, node_id: str) -> int:
    return sum(1 for p in (server.root / "archive").rglob(f"{node_id}/segment-*") if p.is_file())


def report_of(report_dir: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((report_dir / "audit-report.json").read_text())


def test_a_clusters_archive_audits_clean_from_object_storage(
    spark: SparkSession, archive: Archive, tmp_path: Path
) -> None:
    root = archive.copy("clean")
    access = S3Access.resolve(archive.server.endpoint, credentials_file=str(archive.credentials))
    # Not history: an object beside the segments, such as an incremental audit's checkpoint.
    write_object(access, "s3://clean/prod/_audit/checkpoint.json", b'{"format": 1}')
    # A node killed in the middle of a write leaves a partial last line, and its next segment goes on with the next
    # seq: compressed and archived like that, with the archive's own checksum, it is neither malformed nor damaged.
    victim = sorted(root.rglob("segment-*"))[0]
    key = str(victim.relative_to(root))
    plain = zstandard.ZstdDecompressor().decompressobj().decompress(victim.read_bytes())
    crashed = zstandard.ZstdCompressor().compress(plain + b'{"cluster_uuid":"x","node":"y","seq":99')
    victim.unlink()
    access.run("clean", lambda b: b.put_new(key, crashed, {"sha256": hashlib.sha256(crashed).hexdigest()}))

    exit_code = main(archive.args("clean", tmp_path / "r"))
    report = report_of(tmp_path / "r")
    assert exit_code == 0 and report["ok"] is True, (report["violations"], report["stats"]["input"])
    # The nodes stopped gracefully, one at a time: each archived its last segment, `stopped` included, so the
    # last master's publication of the others' departure (which no quorum was left to accept) is settled too.
    assert report["stats"]["input"]["archive_frontier"] == {}, report["stats"]["input"]
    assert (report["events"], report["nodes"], report["malformed_lines"]) == (archive.events, archive.nodes, 0)
    assert report["stats"]["input"]["source"] == "s3://clean/prod"


@pytest.mark.parametrize("damage", ["flipped-bytes", "truncated-at-a-line"])
def test_a_damaged_object_is_named_not_reported_as_a_violation(
    spark: SparkSession, archive: Archive, tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket = f"damaged-{damage}"
    root = archive.copy(bucket)
    victim = sorted(root.rglob("segment-*"))[1]
    data = victim.read_bytes()
    if damage == "flipped-bytes":
        damaged = data[:100] + bytes(b ^ 0x20 for b in data[100:110]) + data[110:]
    else:
        damaged = b"".join(data.splitlines(keepends=True)[:-2])  # whole lines lost: seq would have a hole
    with victim.open("r+b") as file:  # in place, as a failing disk under the store would: metadata stays
        file.write(damaged)
        file.truncate()
    assert main(archive.args(bucket, tmp_path / "r")) == 2
    message = capsys.readouterr().err
    key = f"s3://{bucket}/{victim.relative_to(root)}"
    assert "damaged or truncated archive object" in message and key in message, message
    assert not (tmp_path / "r" / "audit-report.json").exists(), "no report: the input is unusable, not unsafe"


def test_wrong_credentials_are_unusable_input_that_names_the_problem(
    spark: SparkSession, archive: Archive, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = archive.server.credentials_file(tmp_path / "wrong", secret_key="not-the-secret")
    args = archive.args("archive", tmp_path / "r")
    args[args.index("--s3-credentials-file") + 1] = str(wrong)
    assert main(args) == 2
    message = capsys.readouterr().err
    assert "cannot list s3://archive/prod/" in message and "403" in message, message
    assert "not-the-secret" not in message and archive.server.access_key not in message


def test_a_checkpoint_object_round_trips(archive: Archive) -> None:
    access = S3Access.resolve(archive.server.endpoint, credentials_file=str(archive.credentials))
    uri = "s3://archive/checkpoints/audit.json"
    assert read_object(access, uri) is None
    write_object(access, uri, b'{"format": 1}')
    assert read_object(access, uri) == b'{"format": 1}'


def test_the_archive_audits_incrementally_with_its_checkpoint_in_the_bucket(
    spark: SparkSession, archive: Archive, tmp_path: Path
) -> None:
    """As the operator's audit CronJob runs it: `--checkpoint s3://...` beside the archive. The second run reads
    only each node's newest segment (and the events the checkpoint carries), and judges the same."""
    archive.copy("incremental")
    access = S3Access.resolve(archive.server.endpoint, credentials_file=str(archive.credentials))
    checkpoint = "s3://incremental/prod/_audit/checkpoint.json"
    first = [*archive.args("incremental", tmp_path / "first"), "--checkpoint", checkpoint]
    assert main(first) == 0, report_of(tmp_path / "first")["violations"]
    saved = read_object(access, checkpoint)
    assert saved is not None and json.loads(saved)["format"] == 1
    assert len({n["node"] for n in json.loads(saved)["nodes"]}) == archive.nodes
    second = [*archive.args("incremental", tmp_path / "second"), "--checkpoint", checkpoint]
    assert main(second) == 0, report_of(tmp_path / "second")["violations"]
    full, incremental = report_of(tmp_path / "first"), report_of(tmp_path / "second")
    # Nothing was archived between the runs: no event is new, and none is judged twice.
    assert incremental["ok"] is True and incremental["events"] < full["events"], (incremental["events"], full["events"])


@pytest.mark.parametrize("marked", [True, False])
def test_an_object_damaged_before_it_was_archived_is_named_not_a_gap(
    spark: SparkSession, archive: Archive, tmp_path: Path, marked: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """The segment was cut on the node's disk before the upload, so its SHA-256 holds: the archive marks it
    (`x-amz-meta-damaged`), and an object without the mark (an earlier release's upload) fails the frame check."""
    bucket = f"cut-before-upload-{'marked' if marked else 'unmarked'}"
    root = archive.copy(bucket)
    access = S3Access.resolve(archive.server.endpoint, credentials_file=str(archive.credentials))
    victim = sorted(root.rglob("segment-*"))[1]
    key = str(victim.relative_to(root))
    cut = victim.read_bytes()[: victim.stat().st_size // 2]
    victim.unlink()
    metadata = {"sha256": hashlib.sha256(cut).hexdigest()}
    if marked:
        metadata["damaged"] = "truncated: the file ends after 100 bytes, inside a zstd frame that has not ended"
    access.run(bucket, lambda b: b.put_new(key, cut, metadata))
    assert main(archive.args(bucket, tmp_path / "r")) == 2
    message = capsys.readouterr().err
    assert "unusable input" in message and key in message and "truncated" in message, message
    assert not (tmp_path / "r" / "audit-report.json").exists()
