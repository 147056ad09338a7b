"""A bounded prefix delete in a cluster that mixes this release with the previous one (compat/previous-release):
the previous release's master ignores the request's `limit` (msgspec skips fields it does not know) and deletes
every key in one go, as that release always did; a master of this release, asked by a previous-release node
(no `limit`), does the same. No peer stream breaks over the new fields either way."""

from __future__ import annotations

import os
import subprocess
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from coordinated.coordination.requests.keys import MAX_PREFIX_DELETE
from coordinated.coordination.requests.transactions import MAX_TXN_OPS
from coordinated.tools.localcluster import LocalCluster, LocalNode

REPO = Path(__file__).resolve().parents[2]
NODE_PARTS = ("core", "sidecar", "tools", "client")
KEYS = 2 * MAX_PREFIX_DELETE + 500


def previous_revision() -> str:
    lines = (REPO / "compat" / "previous-release").read_text().splitlines()
    return next(line.strip() for line in lines if line.strip() and not line.startswith("#"))


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The previous release's source tree (`git archive` of its revision); the PYTHONPATH that runs its node."""
    tree = tmp_path_factory.mktemp("previous-release")
    archive = tree / "source.tar"
    subprocess.run(
        ["git", "-C", str(REPO), "archive", "--output", str(archive), previous_revision(), *NODE_PARTS], check=True
    )
    with tarfile.open(archive) as source:
        source.extractall(tree, filter="data")
    yield os.pathsep.join(str(tree / part) for part in NODE_PARTS)


def start(cluster: LocalCluster, name: str, pythonpath: str | None, initial: list[str] | None = None) -> LocalNode:
    saved = os.environ.pop("PYTHONPATH", None)
    if pythonpath is not None:
        os.environ["PYTHONPATH"] = pythonpath
    try:
        node = cluster.start(name, initial_master_nodes=initial)
    finally:
        os.environ.pop("PYTHONPATH", None)
        if saved is not None:
            os.environ["PYTHONPATH"] = saved
    cluster.wait_http(node)
    return node


def fill(node: LocalNode, prefix: str, count: int) -> None:
    for start_at in range(0, count, MAX_TXN_OPS):
        ops = [
            {"op": "put", "key": f"{prefix}{i:06d}", "value": i}
            for i in range(start_at, min(count, start_at + MAX_TXN_OPS))
        ]
        status, body = node.request("POST", "/_cluster/metadata/_txn", {"success": ops})
        assert status == 200, body


def deletes_everything(node: LocalNode) -> tuple[dict, dict]:
    fill(node, "big/", KEYS)
    status, deleted = node.request("DELETE", "/_cluster/metadata?prefix=big/")
    assert status == 200, deleted
    fill(node, "job/", KEYS)
    status, txn = node.request(
        "POST", "/_cluster/metadata/_txn", {"success": [{"op": "delete_prefix", "prefix": "job/"}]}
    )
    assert status == 200 and txn["succeeded"], txn
    return deleted, txn["results"][0]


def test_a_prefix_delete_between_releases_deletes_everything_in_one_go(
    make_cluster: Callable[..., LocalCluster], previous_release: str
) -> None:
    cluster = make_cluster()
    for name in ("old-1", "new-2", "new-3"):
        cluster.add(name)
    old = start(cluster, "old-1", previous_release, ["old-1"])
    cluster.wait_master(nodes=1)
    new = start(cluster, "new-2", None)
    start(cluster, "new-3", None)
    assert cluster.wait_master(nodes=3) is old
    # This release's node, the previous release's master: the limit is ignored, nothing is left.
    deleted, op = deletes_everything(new)
    assert (deleted["deleted"], deleted["more"]) == (KEYS, False), deleted
    assert (op["deleted"], op["more"]) == (KEYS, False), op
    # The previous release's node, this release's master: no limit asked, none applied.
    cluster.stop(old)
    assert cluster.wait_master(timeout=30, exclude=old).name.startswith("new-")
    old = start(cluster, "old-1", previous_release)
    cluster.wait_master(nodes=3)
    deleted, op = deletes_everything(old)
    assert deleted["deleted"] == KEYS and op["deleted"] == KEYS
    assert new.client().count("").count == 0
    for node in cluster.nodes.values():
        log = node.log_path.read_text(errors="replace") if node.log_path else ""
        assert "undecodable" not in log and "closing the stream" not in log, node.name
