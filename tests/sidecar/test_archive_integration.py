"""The history archive on real node processes against a real S3-compatible server: every node archives its closed
segments and records it; while the store is down, writes and elections go on, health turns yellow with the
reason, and uploads resume when the store is back. Credentials never show in logs, metrics or the history."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zstandard

from coordinated.sidecar.events.history_segments import expanded_lines, list_segments
from coordinated.tools.localcluster import LocalCluster, LocalNode
from coordinated.tools.s3server import S3Server

SEGMENT_SIZE = "4kb"  # a few writes per segment, so that segments close quickly


def archive_settings(server: S3Server, credentials: Path) -> dict[str, str]:
    return {
        "history.segment_size": SEGMENT_SIZE,
        "history.archive.type": "s3",
        "history.archive.s3.bucket": "archive",
        "history.archive.s3.base_path": "prod",
        "s3.client.default.endpoint": server.address,
        "s3.client.default.protocol": "http",
        "s3.client.default.path_style_access": "true",
        "s3.client.default.credentials_file": str(credentials),
        "s3.client.default.max_retries": "0",
        "s3.client.default.read_timeout": "2s",
    }


def wait(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout}s: {what}")


def write(cluster: LocalCluster, count: int, prefix: str) -> None:
    for i in range(count):
        node = cluster.running()[i % len(cluster.running())]
        status, body = node.put(f"/_cluster/metadata/{prefix}-{i}", {"value": "x" * 40, "i": i})
        assert status == 200, body


def metrics(node: LocalNode) -> dict[str, float]:
    _, text = node.get("/metrics")
    values = {}
    for line in text.splitlines():
        if line.startswith("coordinated_archive_"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def history_lines(node: LocalNode) -> list[dict[str, Any]]:
    """Every event of the node's history (compressed segments and format 2 read as the audit reads them).
    The node is running: between listing and reading, a closed segment can be replaced by its compressed copy
    or cut by retention, so a segment that vanished means the listing is stale and is read again."""
    for _ in range(20):
        try:
            return [
                event
                for segment in list_segments(node.data_dir / "history")
                for line in expanded_lines(segment.path)
                for event in line.events or ()
            ]
        except FileNotFoundError:
            time.sleep(0.05)
    raise AssertionError(f"{node.name}'s history kept changing under 20 readings")


def archived_objects(server: S3Server) -> set[str]:
    root = server.root / "archive"
    return {str(p.relative_to(root)) for p in root.rglob("segment-*") if p.is_file()}


def archiving_cluster(make_cluster: Callable[..., LocalCluster], server: S3Server, tmp_path: Path) -> LocalCluster:
    """3 nodes that archive to `server`, formed."""
    cluster = make_cluster()
    cluster.settings.update(archive_settings(server, server.credentials_file(tmp_path / "credentials")))
    cluster.bootstrap(3)
    return cluster


def test_every_node_archives_its_closed_segments_and_says_so(
    make_cluster: Callable[..., LocalCluster], s3_server: S3Server, tmp_path: Path
) -> None:
    cluster = archiving_cluster(make_cluster, s3_server, tmp_path)
    nodes = cluster.running()
    write(cluster, 60, "k")

    def all_archived() -> bool:
        return all(metrics(n).get("coordinated_archive_uploaded_segments_total", 0) >= 2 for n in nodes) and all(
            metrics(n).get("coordinated_archive_pending_segments") == 0 for n in nodes
        )

    wait("every node archived 2+ segments and has none pending", all_archived)
    _, state = nodes[0].get("/_cluster/state?local=true")
    objects = archived_objects(s3_server)
    for node in nodes:
        prefix = f"prod/{state['cluster_uuid']}/{node.node_id()}/"
        mine = {key for key in objects if key.startswith(prefix)}
        closed = sorted((node.data_dir / "history").glob("segment-*"))[:-1]
        assert {prefix + p.name for p in closed} <= mine, "every closed segment is in the archive"
        events = [e for e in history_lines(node) if e["type"] == "archived"]
        assert {e["location"] for e in events} == {f"s3://archive/{key}" for key in mine}
        assert all(e["cluster_uuid"] == state["cluster_uuid"] and e["node"] == node.node_id() for e in events)
        assert metrics(node)["coordinated_archive_failing"] == 0
        _, health = node.get("/_cluster/health")
        assert health["status"] == "green" and health["archive_problem"] is None


def test_a_store_that_is_down_blocks_no_write_and_no_election(
    make_cluster: Callable[..., LocalCluster], s3_server: S3Server, tmp_path: Path
) -> None:
    cluster = archiving_cluster(make_cluster, s3_server, tmp_path)
    nodes = cluster.running()
    s3_server.stop()
    write(cluster, 60, "while-down")  # every write is acknowledged with the store down

    def yellow_with_reason() -> bool:
        healths = [n.get("/_cluster/health")[1] for n in cluster.running()]
        return all(h["status"] == "yellow" and "cannot" in (h["archive_problem"] or "") for h in healths)

    wait("every node yellow, naming the archive's problem", yellow_with_reason)
    assert all(metrics(n)["coordinated_archive_pending_segments"] >= 1 for n in nodes)
    assert all(metrics(n)["coordinated_archive_failing"] == 1 for n in nodes)
    master = cluster.wait_master()
    cluster.kill(master)
    survivor = cluster.wait_master(exclude=master)
    assert survivor is not master, "a new master was elected with the store down"
    write(cluster, 20, "after-failover")
    s3_server.start()
    cluster.wait_http(cluster.start(master.name))  # the killed node comes back and resumes its uploads too

    def drained() -> bool:
        return all(
            metrics(n).get("coordinated_archive_pending_segments") == 0
            and n.get("/_cluster/health")[1]["archive_problem"] is None
            for n in cluster.running()
        )

    wait("every pending segment uploaded once the store is back", drained, timeout=120)
    for node in nodes:
        text = "".join(p.read_text(errors="replace") for p in node.data_dir.parent.glob("*.log"))
        text += json.dumps(history_lines(node)) + node.get("/metrics")[1] + json.dumps(node.get("/_cluster/health")[1])
        for secret in (s3_server.secret_key, s3_server.access_key):
            assert secret not in text, "a credential reached a log, the history, metrics or health"


def test_a_graceful_stop_archives_the_segment_being_written(
    make_cluster: Callable[..., LocalCluster], s3_server: S3Server, tmp_path: Path
) -> None:
    """A node stopped for good (a scale-down, a deleted cluster) leaves its whole history in the bucket, though no
    segment of it ever filled up."""
    cluster = make_cluster()
    cluster.settings.update(
        {
            **archive_settings(s3_server, s3_server.credentials_file(tmp_path / "credentials")),
            "history.segment_size": "16mb",
        }
    )
    (node,) = cluster.bootstrap(1)
    write(cluster, 10, "k")
    node_id = node.node_id()
    assert not archived_objects(s3_server), "nothing is closed yet"
    assert cluster.stop(node) == 0
    objects = {key.rsplit("/", 1)[-1] for key in archived_objects(s3_server) if f"/{node_id}/" in key}
    segments = sorted((node.data_dir / "history").glob("segment-*"))
    assert objects == {p.name for p in segments[:-1]}, (
        "every segment but the new one (only the archived events) is in the bucket"
    )
    root = s3_server.root / "archive"
    stored = b"".join((next(root.rglob(name))).read_bytes() for name in sorted(objects))
    local = b"".join(p.read_bytes() for p in segments[:-1])
    assert stored == local
    lines = zstandard.ZstdDecompressor().decompressobj().decompress(stored).decode().splitlines()
    assert any('"type":"applied"' in line for line in lines)
    # The archived history ends with the stop, in the node's term: the audit knows it commits nothing more.
    last = json.loads(lines[-1])
    assert last["type"] == "stopped" and last["term"] == max(json.loads(line)["term"] for line in lines), last


def test_retention_deletes_no_segment_the_archive_lacks(
    make_cluster: Callable[..., LocalCluster], s3_server: S3Server, tmp_path: Path
) -> None:
    """With the store down, the history grows past `history.retention.max_size` rather than lose segments the
    archive never had; once the store is back and has them, retention cuts the history down."""
    cluster = make_cluster()
    cluster.settings.update(
        {
            **archive_settings(s3_server, s3_server.credentials_file(tmp_path / "credentials")),
            "history.retention.max_size": "16kb",  # segments of 4kb: a handful are kept
        }
    )
    (node,) = cluster.bootstrap(1)
    s3_server.stop()
    write(cluster, 150, "while-down")

    def closed_segments() -> int:
        return sum(1 for segment in list_segments(node.data_dir / "history") if segment.compressed)

    wait("well past the retention's size in closed segments", lambda: closed_segments() >= 8)
    time.sleep(6)  # a retention pass (every 5 s) had its chance to delete
    history = node.data_dir / "history"
    assert list_segments(history)[0].first_seq == 1, "the oldest segment, not archived, is kept"
    assert not [e for e in history_lines(node) if e["type"] == "retention_cut"]
    assert sum(p.stat().st_size for p in history.glob("segment-*")) > 16 * 1024
    _, health = node.get("/_cluster/health")
    assert health["status"] == "yellow" and "archive" in [p["kind"] for p in health["problems"]]
    assert 'coordinated_node_problems{kind="archive"} 1.0' in node.get("/metrics")[1]
    s3_server.start()

    def cut_down() -> bool:
        return list_segments(history)[0].first_seq > 1 and any(
            e["type"] == "retention_cut" for e in history_lines(node)
        )

    wait("retention deletes the archived segments once the archive has them", cut_down, timeout=120)
    _, state = node.get("/_cluster/state?local=true")
    objects = archived_objects(s3_server)
    kept_first = list_segments(history)[0].first_seq
    deleted = [name for name in objects if int(name.rsplit("segment-", 1)[-1].split(".")[0]) < kept_first]
    assert deleted and all(f"prod/{state['cluster_uuid']}/{node.node_id()}/" in name for name in deleted)


def test_a_store_that_hangs_turns_health_yellow_with_the_s3_clients_defaults(
    make_cluster: Callable[..., LocalCluster], s3_server: S3Server, tmp_path: Path
) -> None:
    """SIGSTOP: the store accepts connections and answers nothing. With the default client settings (`read_timeout`
    50s, 3 retries) only the request's deadline (`call_timeout`, 30s) fails the upload: health turns yellow naming
    it, and `coordinated_archive_failing` says so, well within a minute; SIGCONT and the uploads resume."""
    cluster = make_cluster()
    settings = archive_settings(s3_server, s3_server.credentials_file(tmp_path / "credentials"))
    for default in ("s3.client.default.max_retries", "s3.client.default.read_timeout"):
        del settings[default]
    cluster.settings.update(settings)
    (node,) = cluster.bootstrap(1)
    write(cluster, 30, "before")
    wait("the first segments archived", lambda: metrics(node).get("coordinated_archive_uploaded_segments_total", 0) > 0)
    assert s3_server.process is not None
    os.kill(s3_server.process.pid, signal.SIGSTOP)
    try:
        hung_at = time.monotonic()
        write(cluster, 30, "while-hung")  # closes segments: an upload starts and hangs

        def yellow() -> dict[str, Any] | None:
            health = node.get("/_cluster/health")[1]
            return health if health["status"] == "yellow" and health["archive_problem"] else None

        health = wait("health yellow with the archive's problem", yellow, timeout=120)
        took = time.monotonic() - hung_at
        print(f"health yellow {took:.1f}s after the store hung: {health['archive_problem']}")
        assert "no answer within" in health["archive_problem"] and "call_timeout" in health["archive_problem"]
        values = metrics(node)
        assert values["coordinated_archive_failing"] == 1 and values["coordinated_archive_failures_total"] >= 1
        assert values["coordinated_archive_pending_segments"] >= 1
    finally:
        os.kill(s3_server.process.pid, signal.SIGCONT)

    def drained() -> bool:
        return metrics(node).get("coordinated_archive_pending_segments") == 0 and (
            node.get("/_cluster/health")[1]["archive_problem"] is None
        )

    wait("every pending segment uploaded once the store answers again", drained, timeout=120)
