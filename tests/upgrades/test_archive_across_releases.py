"""The history archive across an upgrade: nodes of the previous release archive their segments to an S3-compatible
server and the previous release's audit leaves its checkpoint there; the nodes are upgraded one at a time and go
on archiving; this release's audit goes on from that checkpoint over the archive (objects of both releases) and
judges it ok."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from mixed import Mixed

from coordinated.audit.cli import main as audit_main
from coordinated.audit.s3 import S3Access, read_object
from coordinated.release import installed_release
from coordinated.tools.localcluster import FAST_SETTINGS, LocalNode
from coordinated.tools.previous_release import PreviousRelease
from coordinated.tools.s3server import S3Server

pytestmark = pytest.mark.timeout(900)
CHECKPOINT = "s3://archive/prod/_audit/checkpoint.json"


def archived(server: S3Server, node: LocalNode) -> int:
    return sum(1 for path in (server.root / "archive").rglob(f"{node.node_id()}/segment-*") if path.is_file())


def wait_archived(server: S3Server, nodes: list[LocalNode]) -> None:
    """Until every closed segment of every node is in the bucket (the open one is not archived yet)."""
    deadline = time.monotonic() + 60
    while any(len(list((node.data_dir / "history").glob("segment-*"))) - 1 > archived(server, node) for node in nodes):
        assert time.monotonic() < deadline, "the archive did not catch up"
        time.sleep(0.2)


def test_this_release_audits_on_from_the_previous_releases_checkpoint_over_an_archive_of_both(
    previous_release: PreviousRelease, s3_server: S3Server, tmp_path: Path
) -> None:
    credentials = s3_server.credentials_file(tmp_path / "credentials")
    settings = {
        **FAST_SETTINGS,
        "history.segment_size": "4kb",
        "history.archive.type": "s3",
        "history.archive.s3.bucket": "archive",
        "history.archive.s3.base_path": "prod",
        "s3.client.default.endpoint": s3_server.endpoint,
        "s3.client.default.path_style_access": "true",
        "s3.client.default.credentials_file": str(credentials),
    }
    audit_args = [
        "s3://archive/prod",
        "--s3-endpoint", s3_server.endpoint,
        "--s3-credentials-file", str(credentials),
        "--checkpoint", CHECKPOINT,
        "--no-html",
    ]  # fmt: skip
    mixed = Mixed(tmp_path / "cluster", previous_release, settings)
    try:
        nodes = mixed.bootstrap_old(3)
        for i in range(40):
            assert nodes[i % 3].put(f"/_cluster/metadata/old/{i}", {"i": i})[0] == 200
        wait_archived(s3_server, nodes)
        # The previous release's audit of what its nodes archived, which leaves its checkpoint in the bucket.
        started = time.monotonic()
        first = subprocess.run(
            previous_release.command("audit", *audit_args, "--report-dir", str(tmp_path / "first")),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
        print(f"the previous release's audit took {time.monotonic() - started:.1f}s")
        access = S3Access.resolve(s3_server.endpoint, credentials_file=str(credentials))
        written_by_old = json.loads(read_object(access, CHECKPOINT) or b"{}")
        assert written_by_old["format"] == 1 and "release" not in written_by_old
        # The rolling upgrade, followers first, the master last, with writes in between.
        master = mixed.master()
        for node in sorted(nodes, key=lambda n: n is master):
            mixed.upgrade(node)
            mixed.wait_joined(3)
            for i in range(15):
                assert mixed.master().put(f"/_cluster/metadata/new/{node.name}/{i}", i)[0] == 200
        mixed.wait_moved(mixed.master())
        wait_archived(s3_server, nodes)
        # One at a time, the master last: each archives its last segment, `stopped` included.
        master = mixed.master()
        for node in sorted(nodes, key=lambda n: n is master):
            assert mixed.cluster.stop(node, timeout=30) == 0
            time.sleep(1)
    finally:
        mixed.stop_all()
    started = time.monotonic()
    code = audit_main([*audit_args, "--report-dir", str(tmp_path / "second")])
    print(f"this release's audit took {time.monotonic() - started:.1f}s")
    report = json.loads((tmp_path / "second" / "audit-report.json").read_text())
    assert code == 0 and report["ok"], report["violations"]
    ids = {node.node_id() for node in nodes}
    assert report["events"] > 0 and {entry["node"] for entry in report["stats"]["per_node"].values()} == ids
    assert json.loads(read_object(access, CHECKPOINT) or b"{}")["release"] == installed_release()
