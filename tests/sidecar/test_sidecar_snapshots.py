"""Snapshots and restore with real node processes: the fs repository, path.repo, damaged files, a consistent
cut under concurrent writes, and a restore into a new cluster with another UUID."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coordinated.sidecar.snapshots import decode_snapshot, snapshot_path
from coordinated.tools.localcluster import FAST_SETTINGS, LocalCluster, LocalNode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def history(node: LocalNode) -> list[dict[str, Any]]:
    _, text = node.get("/_history?after_seq=0")
    if isinstance(text, dict):
        return [text]
    return [json.loads(line) for line in text.splitlines() if line]


def with_repo(root: Path) -> dict[str, str]:
    return {**FAST_SETTINGS, "path.repo": str(root)}


def every_key(node: LocalNode) -> dict[str, tuple[Any, int, int]]:
    """Every key with its value, version and create_version, read linearizably one by one."""
    status, state = node.get("/_cluster/state")
    assert status == 200, state
    found: dict[str, tuple[Any, int, int]] = {}
    for key in state["metadata"]["kv"]:
        status, body = node.get(f"/_cluster/metadata/{key}")
        assert status == 200, body
        found[key] = (body["value"], body["version"], body["create_version"])
    return found


def test_snapshot_then_restore_into_a_new_cluster(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    root = tmp_path / "backups"
    source = make_cluster(settings=with_repo(root))
    nodes = source.bootstrap(3)
    for i in range(20):
        assert nodes[i % 3].put(f"/_cluster/metadata/app/key-{i}", {"n": i})[0] == 200
    assert nodes[0].put("/_cluster/metadata/app/key-3", "rewritten")[0] == 200  # version != create_version
    assert nodes[1].request("DELETE", "/_cluster/metadata/app/key-4")[0] == 200
    status, body = nodes[2].put("/_cluster/settings", {"persistent": {"cluster.no_master_block": "all"}})
    assert status == 200, body
    status, session = nodes[0].request("POST", "/_sessions", {"ttl": "60s"})
    assert status == 201, session
    assert nodes[0].put(f"/_cluster/metadata/lock?session={session['id']}", "held")[0] == 200
    # Registered through one node, known to all (cluster-state metadata); snapshotted through another.
    status, body = nodes[1].put("/_snapshot/backups", {"type": "fs", "settings": {"location": str(root / "demo")}})
    assert status == 200 and body == {"acknowledged": True}, body
    status, repos = nodes[2].get("/_snapshot/backups")
    assert repos == {"backups": {"type": "fs", "settings": {"location": str(root / "demo")}}}
    expected = every_key(nodes[0])
    status, taken = nodes[2].put("/_snapshot/backups/snap-1?wait_for_completion=true")
    assert status == 200, taken
    info = taken["snapshot"]
    assert info["state"] == "SUCCESS" and info["keys"] == len(expected) == 20 and info["sessions"] == 1
    source_uuid = nodes[0].get("/_cluster/state")[1]["cluster_uuid"]
    assert info["cluster_uuid"] == source_uuid
    status, listed = nodes[0].get("/_snapshot/backups/_all")
    assert status == 200 and [s["snapshot"] for s in listed["snapshots"]] == ["snap-1"]
    taken_events = [e for e in history(nodes[2]) if e["type"] == "snapshot_taken"]
    assert [(e["snapshot"], e["version"]) for e in taken_events] == [("backups:snap-1", info["state_version"])]

    target = make_cluster(settings=with_repo(root))
    new_nodes = target.bootstrap(3)
    assert new_nodes[0].put("/_cluster/metadata/only-in-the-new-cluster", 1)[0] == 200
    target_uuid = new_nodes[0].get("/_cluster/state")[1]["cluster_uuid"]
    assert target_uuid != source_uuid
    status, body = new_nodes[1].put("/_snapshot/backups", {"type": "fs", "settings": {"location": "demo"}})
    assert status == 200, body  # a relative location is under the first path.repo root
    status, restored = new_nodes[2].request("POST", "/_snapshot/backups/snap-1/_restore")
    assert status == 200, restored
    assert every_key(new_nodes[0]) == expected  # every key, with its value, version and create_version
    assert every_key(new_nodes[1]) == expected
    # The snapshot's session is not restored: its ephemeral key is a persistent key now.
    assert new_nodes[0].get("/_sessions")[1]["sessions"] == []
    assert new_nodes[0].get("/_cluster/state")[1]["metadata"]["kv"]["lock"] == "held"
    status, settings = new_nodes[0].get("/_cluster/settings")
    assert settings["persistent"] == {"cluster.no_master_block": "all"}
    # The restored state is above every restored version, so versions keep increasing after it.
    assert restored["snapshot"]["version"] > max(version for _, version, _ in expected.values())
    status, write = new_nodes[0].put("/_cluster/metadata/app/key-0", "after")
    assert write["version"] > restored["snapshot"]["version"]
    assert new_nodes[0].get("/_cluster/state")[1]["cluster_uuid"] == target_uuid
    restored_events = [e for e in history(new_nodes[2]) if e["type"] == "snapshot_restored"]
    assert [(e["snapshot"], e["version"]) for e in restored_events] == [
        ("backups:snap-1", restored["snapshot"]["version"])
    ]


def test_damaged_truncated_missing_and_duplicate_snapshots(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    root = tmp_path / "backups"
    cluster = make_cluster(settings=with_repo(root))
    (node,) = cluster.bootstrap(1)
    assert node.put("/_cluster/metadata/a", 1)[0] == 200
    assert node.put("/_snapshot/r", {"type": "fs", "settings": {"location": str(root)}})[0] == 200
    assert node.put("/_snapshot/r/good?wait_for_completion=true")[0] == 200
    status, body = node.put("/_snapshot/r/good?wait_for_completion=true")
    assert status == 400 and body["error"]["type"] == "invalid_snapshot_name_exception", body
    data = snapshot_path(root, "good").read_bytes()
    snapshot_path(root, "truncated").write_bytes(data[: len(data) - 7])
    flipped = bytearray(data.replace(b'"good"', b'"flip"'))
    flipped[-3] ^= 0x01
    snapshot_path(root, "flip").write_bytes(bytes(flipped))
    for name, why in (("truncated", "truncated"), ("flip", "checksum mismatch")):
        for method, path in (("POST", f"/_snapshot/r/{name}/_restore"), ("GET", f"/_snapshot/r/{name}")):
            status, body = node.request(method, path)
            assert status == 500 and body["error"]["type"] == "corrupt_state_exception", body
            assert str(snapshot_path(root, name)) in body["error"]["reason"] and why in body["error"]["reason"]
    status, listed = node.get("/_snapshot/r/_all")
    states = {s["snapshot"]: s["state"] for s in listed["snapshots"]}
    assert states == {"good": "SUCCESS", "truncated": "FAILED", "flip": "FAILED"}
    for method, path in (
        ("GET", "/_snapshot/r/absent"),
        ("POST", "/_snapshot/r/absent/_restore"),
        ("DELETE", "/_snapshot/r/absent"),
    ):
        status, body = node.request(method, path)
        assert status == 404 and body["error"]["type"] == "snapshot_missing_exception", body
        assert body["error"]["reason"] == "[r:absent] is missing"
    assert node.request("DELETE", "/_snapshot/r/good")[0] == 200
    assert node.get("/_snapshot/r/good")[0] == 404
    assert node.get("/_cluster/metadata/a")[1]["value"] == 1  # nothing was restored


def test_path_repo_and_repository_checks(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    root = tmp_path / "allowed"
    cluster = make_cluster(settings=with_repo(root))
    (node,) = cluster.bootstrap(1)
    for location in (str(tmp_path / "elsewhere"), str(root / ".." / "escape"), "../escape"):
        status, body = node.put("/_snapshot/r", {"type": "fs", "settings": {"location": location}})
        assert status == 400 and body["error"]["type"] == "repository_exception", body
        assert (
            f"location [{location}] doesn't match any of the locations specified by path.repo"
            in (body["error"]["reason"])
        )
    status, body = node.put("/_snapshot/r", {"type": "s3", "settings": {"location": str(root)}})
    assert status == 400 and "repository type [s3] does not exist" in body["error"]["reason"], body
    status, body = node.put("/_snapshot/Bad", {"type": "fs", "settings": {"location": str(root)}})
    assert status == 400 and "Invalid repository name [Bad]" in body["error"]["reason"], body
    status, body = node.put("/_snapshot/nowhere/s?wait_for_completion=true")
    assert status == 404 and body["error"] == {"type": "repository_missing_exception", "reason": "[nowhere] missing"}
    assert node.get("/_snapshot")[1] == {}

    without = make_cluster()  # no path.repo: no location is allowed
    (bare,) = without.bootstrap(1)
    status, body = bare.put("/_snapshot/r", {"type": "fs", "settings": {"location": str(root)}})
    assert status == 400 and "because this setting is empty" in body["error"]["reason"], body


def test_snapshots_under_concurrent_writes_are_consistent_cuts(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    root = tmp_path / "backups"
    cluster = make_cluster(settings=with_repo(root))
    nodes = cluster.bootstrap(3)
    assert nodes[0].put("/_snapshot/r", {"type": "fs", "settings": {"location": str(root)}})[0] == 200
    acked = [0]  # the highest i whose transaction was acknowledged
    stop = threading.Event()

    def writer(node: LocalNode) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            # x, y and seq/i change together: a cut between two writes always sees x == y and every seq/j<=x.
            ops = [{"op": "put", "key": k, "value": i} for k in ("x", "y", f"seq/{i}")]
            status, body = node.request("POST", "/_cluster/metadata/_txn", {"success": ops})
            assert status == 200 and body["succeeded"], body
            acked[0] = i

    thread = threading.Thread(target=writer, args=(nodes[0],), daemon=True)
    thread.start()
    try:
        names = []
        for n in range(6):
            floor = acked[0]
            status, body = nodes[1 + n % 2].put(f"/_snapshot/r/cut-{n}?wait_for_completion=true")
            assert status == 200, body
            names.append((f"cut-{n}", floor))
    finally:
        stop.set()
        thread.join(timeout=15)
    assert acked[0] > 0
    for name, floor in names:
        snapshot = decode_snapshot(snapshot_path(root, name).read_bytes(), snapshot_path(root, name))
        x = snapshot.kv.get("x", 0)
        assert snapshot.kv.get("y", 0) == x, name
        assert x >= floor, f"{name} misses a write acknowledged before it was asked for"
        assert {k for k in snapshot.kv if k.startswith("seq/")} == {f"seq/{j}" for j in range(1, x + 1)}
        assert all(v.version <= snapshot.version for v in snapshot.kv_versions.values())
