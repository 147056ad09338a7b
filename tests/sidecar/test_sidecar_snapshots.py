"""Snapshots and restore with real node processes: the fs and s3 repositories (the latter on a real S3-compatible
server), path.repo, damaged snapshots, a consistent cut under concurrent writes, and a restore into a new cluster
with another UUID. The tests that both types pass run once per type: they behave alike."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinated.s3.object_store import ObjectStore
from coordinated.s3.s3_settings import S3ClientSettings
from coordinated.sidecar.features.snapshot_fs import snapshot_path
from coordinated.sidecar.features.snapshots import blob_name, decode_snapshot
from coordinated.tools.localcluster import FAST_SETTINGS, LocalCluster, LocalNode
from coordinated.tools.s3server import S3Server

pytestmark = pytest.mark.timeout(120)


def history(node: LocalNode) -> list[dict[str, Any]]:
    _, text = node.get("/_history?after_seq=0")
    if isinstance(text, dict):
        return [text]
    return [json.loads(line) for line in text.splitlines() if line]


def with_repo(root: Path) -> dict[str, str]:
    return {**FAST_SETTINGS, "path.repo": str(root)}


class Repo:
    """One repository type as the tests use it: node settings, registration bodies and raw access to the blobs."""

    kind: str

    def settings(self) -> dict[str, str]:
        raise NotImplementedError

    def body(self, *, relative: bool = False) -> dict[str, Any]:
        raise NotImplementedError

    def where(self, name: str) -> str:
        raise NotImplementedError

    def read_blob(self, name: str) -> bytes:
        raise NotImplementedError

    def write_blob(self, name: str, data: bytes) -> None:
        raise NotImplementedError


class FsRepo(Repo):
    kind = "fs"

    def __init__(self, root: Path) -> None:
        self.root = root

    def settings(self) -> dict[str, str]:
        return with_repo(self.root)

    def body(self, *, relative: bool = False) -> dict[str, Any]:
        return {"type": "fs", "settings": {"location": "demo" if relative else str(self.root / "demo")}}

    def where(self, name: str) -> str:
        return str(snapshot_path(self.root / "demo", name))

    def read_blob(self, name: str) -> bytes:
        return snapshot_path(self.root / "demo", name).read_bytes()

    def write_blob(self, name: str, data: bytes) -> None:
        snapshot_path(self.root / "demo", name).write_bytes(data)


class S3Repo(Repo):
    kind = "s3"

    def __init__(self, server: S3Server, credentials: Path) -> None:
        self.server = server
        self.credentials = credentials
        server.create_bucket("snapshots")

    def settings(self) -> dict[str, str]:
        return {
            **FAST_SETTINGS,
            "s3.client.default.endpoint": self.server.endpoint,
            "s3.client.default.path_style_access": "true",
            "s3.client.default.credentials_file": str(self.credentials),
        }

    def body(self, *, relative: bool = False) -> dict[str, Any]:
        return {"type": "s3", "settings": {"bucket": "snapshots", "base_path": "demo", "client": "default"}}

    def where(self, name: str) -> str:
        return f"s3://snapshots/demo/{blob_name(name)}"

    def _run(self, operation: Callable[..., Any]) -> Any:
        async def main() -> Any:
            store = ObjectStore()
            client = S3ClientSettings("t", self.server.endpoint, "us-east-1", True, str(self.credentials), 10.0, 1)
            try:
                return await operation(store.bucket(client, "snapshots"))
            finally:
                await store.close()

        return asyncio.run(main())

    def read_blob(self, name: str) -> bytes:
        data: bytes = self._run(lambda bucket: bucket.get(f"demo/{blob_name(name)}"))
        return data

    def write_blob(self, name: str, data: bytes) -> None:
        self._run(lambda bucket: bucket.put(f"demo/{blob_name(name)}", data))


@pytest.fixture(params=["fs", "s3"])
def repo(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Repo]:
    if request.param == "fs":
        yield FsRepo(tmp_path / "backups")
        return
    server: S3Server = request.getfixturevalue("s3_server")
    yield S3Repo(server, server.credentials_file(tmp_path / "credentials"))


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


def test_snapshot_then_restore_into_a_new_cluster(make_cluster: Callable[..., LocalCluster], repo: Repo) -> None:
    source = make_cluster(settings=repo.settings())
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
    status, body = nodes[1].put("/_snapshot/backups", repo.body())
    assert status == 200 and body == {"acknowledged": True}, body
    status, repos = nodes[2].get("/_snapshot/backups")
    assert repos == {"backups": repo.body()}
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

    target = make_cluster(settings=repo.settings())
    new_nodes = target.bootstrap(3)
    assert new_nodes[0].put("/_cluster/metadata/only-in-the-new-cluster", 1)[0] == 200
    target_uuid = new_nodes[0].get("/_cluster/state")[1]["cluster_uuid"]
    assert target_uuid != source_uuid
    status, body = new_nodes[1].put("/_snapshot/backups", repo.body(relative=True))
    assert status == 200, body  # a relative fs location is under the first path.repo root
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
    make_cluster: Callable[..., LocalCluster], repo: Repo
) -> None:
    cluster = make_cluster(settings=repo.settings())
    (node,) = cluster.bootstrap(1)
    assert node.put("/_cluster/metadata/a", 1)[0] == 200
    assert node.put("/_snapshot/r", repo.body())[0] == 200
    assert node.put("/_snapshot/r/good?wait_for_completion=true")[0] == 200
    status, body = node.put("/_snapshot/r/good?wait_for_completion=true")
    assert status == 400 and body["error"]["type"] == "invalid_snapshot_name_exception", body
    data = repo.read_blob("good")
    repo.write_blob("truncated", data[: len(data) - 7])
    flipped = bytearray(data.replace(b'"good"', b'"flip"'))
    flipped[-3] ^= 0x01
    repo.write_blob("flip", bytes(flipped))
    for name, why in (("truncated", "truncated"), ("flip", "checksum mismatch")):
        for method, path in (("POST", f"/_snapshot/r/{name}/_restore"), ("GET", f"/_snapshot/r/{name}")):
            status, body = node.request(method, path)
            assert status == 500 and body["error"]["type"] == "corrupt_state_exception", body
            assert repo.where(name) in body["error"]["reason"] and why in body["error"]["reason"]
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
    status, body = node.put("/_snapshot/r", {"type": "url", "settings": {"location": str(root)}})
    assert status == 400 and "repository type [url] does not exist" in body["error"]["reason"], body
    status, body = node.put("/_snapshot/r", {"type": "s3", "settings": {"location": str(root)}})
    assert status == 400 and "the s3 repository settings are [bucket]" in body["error"]["reason"], body
    status, body = node.put("/_snapshot/r", {"type": "s3", "settings": {"bucket": "b", "client": "backups"}})
    assert status == 400 and "invalid [bucket]" in body["error"]["reason"], body
    status, body = node.put("/_snapshot/r", {"type": "s3", "settings": {"bucket": "snaps", "client": "backups"}})
    assert status == 400 and "unknown s3 client [backups]" in body["error"]["reason"], body
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


def test_an_object_store_that_is_down_fails_snapshot_requests_with_the_reason(
    make_cluster: Callable[..., LocalCluster], s3_server: S3Server, tmp_path: Path
) -> None:
    repo = S3Repo(s3_server, s3_server.credentials_file(tmp_path / "credentials"))
    cluster = make_cluster(settings={**repo.settings(), "s3.client.default.max_retries": "0"})
    (node,) = cluster.bootstrap(1)
    assert node.put("/_snapshot/r", repo.body())[0] == 200
    assert node.put("/_snapshot/r/before?wait_for_completion=true")[0] == 200
    s3_server.stop()
    status, body = node.put("/_snapshot/r/during?wait_for_completion=true")
    assert status == 500 and body["error"]["type"] == "snapshot_exception", body
    assert "cannot write s3://snapshots/demo/snap-during.dat" in body["error"]["reason"]
    for method, path in (("GET", "/_snapshot/r/_all"), ("POST", "/_snapshot/r/before/_restore")):
        status, body = node.request(method, path)
        assert status == 500 and body["error"]["type"] == "repository_exception", body
        assert "s3://snapshots/demo/" in body["error"]["reason"]
        assert s3_server.secret_key not in json.dumps(body) and s3_server.access_key not in json.dumps(body)
    status, body = node.put("/_snapshot/other", repo.body())
    assert status == 500 and body["error"]["type"] == "repository_verification_exception", body
    assert node.put("/_cluster/metadata/still-writable", 1)[0] == 200
    s3_server.start()
    status, listed = node.get("/_snapshot/r/_all")
    assert status == 200 and [s["snapshot"] for s in listed["snapshots"]] == ["before"]
