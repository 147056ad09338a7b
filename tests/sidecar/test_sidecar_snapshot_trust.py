"""Crafted snapshots: a valid checksum over hostile content is refused, by the reader (content that contradicts
itself) or by the master (what a write of it would be refused for), and nothing is restored; with a snapshot
secret only snapshots signed with it are restored. Real node processes."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coordinated.coordination.counters import LONG_MAX
from coordinated.sidecar.features.snapshot_fs import snapshot_path
from coordinated.sidecar.features.snapshots import MAGIC
from coordinated.tools.localcluster import FAST_SETTINGS, LocalCluster, LocalNode

pytestmark = pytest.mark.timeout(180)


def payload_of(path: Path) -> dict[str, Any]:
    _, _, payload = path.read_bytes().partition(b"\n")
    return json.loads(payload)  # type: ignore[no-any-return]


def write_crafted(root: Path, name: str, payload: dict[str, Any], signature: bytes = b"") -> None:
    """A snapshot file with a valid header and checksum over `payload`, as anyone who can write to the
    repository can make one."""
    body = json.dumps({**payload, "snapshot": name}).encode()
    header = b"%s %s %d" % (MAGIC, hashlib.sha256(body).hexdigest().encode(), len(body))
    snapshot_path(root, name).write_bytes(header + (b" " + signature if signature else b"") + b"\n" + body)


def crafted_cases(good: dict[str, Any]) -> dict[str, tuple[dict[str, Any], int, str]]:
    """name -> (payload, expected status, words of the refusal)."""
    version = good["version"]
    kv, versions = good["kv"], good["kv_versions"]

    def with_key(key: str, value: Any, key_versions: list[int] | None = None) -> dict[str, Any]:
        return {**good, "kv": {**kv, key: value}, "kv_versions": {**versions, key: key_versions or [version, version]}}

    return {
        "reserved-key": (with_key("_txn", 1), 400, "reserved"),
        "control-key": (with_key("bad\u0007key", 1), 400, "key name"),
        "oversized-value": (with_key("big", "x" * 5000), 400, "max_value_size"),
        "unknown-setting": ({**good, "persistent_settings": {"made.up": "1"}}, 400, "unknown setting"),
        "bad-setting": (
            {**good, "persistent_settings": {"cluster.max_voting_config_exclusions": "soon"}},
            400,
            "max_voting_config_exclusions",
        ),
        "key-newer-than-snapshot": (with_key("k", 1, [version + 5, 1]), 500, "beyond the snapshot's"),
        "versions-for-other-keys": ({**good, "kv_versions": {}}, 500, "exactly its keys"),
        "end-of-range-version": (
            {**good, "version": LONG_MAX, "kv_versions": {key: [LONG_MAX, 1] for key in kv}},
            400,
            "beyond the highest version",
        ),
        "negative-version": ({**good, "version": -1}, 500, "damaged"),
        "huge-number": ({**good, "term": 2**64}, 500, "damaged"),
        "session-of-nobody": ({**good, "kv_sessions": {next(iter(kv)): "ghost"}}, 500, "does not hold"),
        "malformed-session": ({**good, "sessions": {"bad id!": {"ttl_ms": 1000}}}, 500, "session id"),
        "fake-unsafe-bootstrap": (
            {**good, "persistent_settings": {"cluster.metadata.unsafe-bootstrap": "nope"}},
            500,
            "only the node tool",
        ),
    }


def cluster_with_repo(make_cluster: Callable[..., LocalCluster], root: Path, **extra: str) -> LocalNode:
    settings = {**FAST_SETTINGS, "path.repo": str(root), "cluster.metadata.max_value_size": "4kb", **extra}
    (node,) = make_cluster(settings=settings).bootstrap(1)
    assert node.put("/_snapshot/r", {"type": "fs", "settings": {"location": str(root)}})[0] == 200
    for i in range(3):
        assert node.put(f"/_cluster/metadata/app/{i}", {"n": i})[0] == 200
    assert node.put("/_snapshot/r/good?wait_for_completion=true")[0] == 200
    return node


def test_crafted_snapshots_with_valid_checksums_are_refused(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    root = tmp_path / "backups"
    node = cluster_with_repo(make_cluster, root)
    good = payload_of(snapshot_path(root, "good"))
    assert node.put("/_cluster/metadata/app/0", "after the snapshot")[0] == 200
    _, before = node.get("/_cluster/state")
    wrong: list[str] = []
    for name, (payload, status, words) in crafted_cases(good).items():
        write_crafted(root, name, payload)
        got, body = node.request("POST", f"/_snapshot/r/{name}/_restore")
        reason = body["error"]["reason"] if isinstance(body, dict) and "error" in body else str(body)
        if got != status or words not in reason or str(snapshot_path(root, name)) not in reason:
            wrong.append(f"{name}: {got} {reason}")
    assert not wrong, "\n".join(wrong)
    _, after = node.get("/_cluster/state")
    assert after["metadata"]["kv"] == before["metadata"]["kv"]  # nothing was restored
    assert after["metadata"]["persistent_settings"] == before["metadata"]["persistent_settings"]
    status, restored = node.request("POST", "/_snapshot/r/good/_restore")  # the real one still restores
    assert status == 200, restored
    assert node.get("/_cluster/metadata/app/0")[1]["value"] == {"n": 0}


def test_with_a_snapshot_secret_only_signed_snapshots_are_restored(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    root = tmp_path / "backups"
    secret = tmp_path / "snapshot-secret"
    secret.write_bytes(b"snapshot-secret-0123456789abcdef")
    node = cluster_with_repo(make_cluster, root, **{"snapshot.secret_file": str(secret)})
    header = snapshot_path(root, "good").read_bytes().partition(b"\n")[0]
    assert header.split(b" ")[3].startswith(b"hmac-sha256=")
    good = payload_of(snapshot_path(root, "good"))
    tampered = {**good, "kv": {**good["kv"], "app/0": "planted"}}
    write_crafted(root, "unsigned", tampered)
    write_crafted(root, "resigned", tampered, signature=header.split(b" ")[3])  # the good file's signature
    for name, words in (("unsigned", "is not signed"), ("resigned", "not signed with this node's")):
        status, body = node.request("POST", f"/_snapshot/r/{name}/_restore")
        assert status == 500 and words in body["error"]["reason"], body
    status, listed = node.get("/_snapshot/r/_all")
    assert {s["snapshot"]: s["state"] for s in listed["snapshots"]} == {
        "good": "SUCCESS",
        "unsigned": "FAILED",
        "resigned": "FAILED",
    }
    assert node.put("/_cluster/metadata/app/0", "changed")[0] == 200
    assert node.request("POST", "/_snapshot/r/good/_restore")[0] == 200
    assert node.get("/_cluster/metadata/app/0")[1]["value"] == {"n": 0}
