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

import pytest
from pyspark.sql import SparkSession

from coordinated.audit.cli import main
from coordinated.audit.s3 import (
    S3Access,
    SegmentObject,
    list_segments,
    read_object,
    s3a_jars,
    segments_after,
    write_object,
)
from coordinated.tools.localcluster import FAST_SETTINGS, LocalCluster
from coordinated.tools.s3server import S3Server

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(600)]


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
        finally:
            cluster.stop_all()
        objects = sorted((server.root / "archive").rglob("segment-*"))
        events = sum(len(p.read_bytes().splitlines()) for p in objects)
        assert events > 0 and all(archived_count(server, n.node_id()) >= 3 for n in nodes)
        yield Archive(server, credentials, events, len(nodes))


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
    # seq: archived like that, with the archive's own checksum, it is a note, neither malformed nor damaged.
    victim = sorted(root.rglob("segment-*"))[0]
    key = str(victim.relative_to(root))
    crashed = victim.read_bytes() + b'{"cluster_uuid":"x","node":"y","seq":99'
    victim.unlink()
    access.run("clean", lambda b: b.put_new(key, crashed, {"sha256": hashlib.sha256(crashed).hexdigest()}))

    exit_code = main(archive.args("clean", tmp_path / "r"))
    report = report_of(tmp_path / "r")
    assert exit_code == 0 and report["ok"] is True, (report["violations"], report["stats"]["input"])
    held_back = held_back_events(root, report["stats"]["input"]["archive_frontier"])
    assert (report["events"], report["nodes"], report["malformed_lines"]) == (
        archive.events - held_back,
        archive.nodes,
        0,
    )
    assert held_back < archive.events // 10, "the nodes stopped gracefully: their last segments were archived"
    assert report["stats"]["input"]["source"] == "s3://clean/prod"
    (note,) = report["stats"]["input"]["truncated_lines"]
    assert note["source"] == f"s3a://clean/{key}" and note["line"] == len(crashed.splitlines()), note
    assert note["text"].startswith('{"cluster_uuid":"x"')


def held_back_events(bucket: Path, frontiers: dict[str, int]) -> int:
    """Events of each node's archive from its first state event above its cluster's frontier on."""
    held = 0
    for folder in {p.parent for p in bucket.rglob("segment-*")}:
        events = sorted(
            (
                json.loads(line)
                for p in folder.glob("segment-*")
                for line in p.read_bytes().splitlines()
                if line.endswith(b"}")  # not a crash-cut last line
            ),
            key=lambda e: e["seq"],
        )
        above = [
            e["seq"]
            for e in events
            if e["cluster_uuid"] in frontiers and (e.get("version") or 0) > frontiers[e["cluster_uuid"]]
        ]
        held += sum(1 for e in events if above and e["seq"] >= min(above))
    return held


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


def test_only_the_segments_after_a_checkpoint_are_listed_for_an_incremental_audit(archive: Archive) -> None:
    access = S3Access.resolve(archive.server.endpoint, credentials_file=str(archive.credentials))
    segments = list_segments(access, "s3://archive/prod")
    folders = sorted({s.folder for s in segments})
    assert len(folders) == 3 and all(f.startswith("s3a://archive/prod/") for f in folders)
    assert segments_after(segments, {}) == segments, "no checkpoint: everything"
    first = [s for s in segments if s.folder == folders[0]]
    node = first[0].node
    assert first[0].folder.endswith(f"/{node[0]}/{node[1]}")
    # The checkpoint saw node 0 up to the middle of its second segment: its first segment is old.
    seen = {node: first[1].first_seq + 1}
    kept = segments_after(segments, seen)
    assert first[0] not in kept and first[1] in kept and all(s in kept for s in first[2:])
    assert all(s in kept for s in segments if s.folder != folders[0])
    seen_all = {node: first[-1].first_seq + 10**6}
    assert [s for s in segments_after(segments, seen_all) if s.folder == folders[0]] == [first[-1]], (
        "the newest segment of a folder may hold anything"
    )


def test_segments_after_needs_no_store() -> None:
    a = [SegmentObject("b", f"p/c/n1/segment-{seq:012d}.jsonl", 10) for seq in (1, 11, 21)]
    b = [SegmentObject("b", "p/c/n2/segment-000000000001.jsonl", 10)]
    assert segments_after([*a, *b], {("c", "n1"): 10}) == [a[1], a[2], *b]
    assert segments_after([*a, *b], {("c", "n1"): 11}) == [a[1], a[2], *b]
    assert segments_after([*a, *b], {("c", "n1"): 9}) == [*a, *b]
    assert segments_after([*a, *b], {("c", "n1"): 10**6, ("c", "n2"): 10**6}) == [a[2], *b]


def test_a_checkpoint_object_round_trips(archive: Archive) -> None:
    access = S3Access.resolve(archive.server.endpoint, credentials_file=str(archive.credentials))
    uri = "s3://archive/checkpoints/audit.json"
    assert read_object(access, uri) is None
    write_object(access, uri, b'{"format": 1}')
    assert read_object(access, uri) == b'{"format": 1}'
