"""Key versions, conditional writes and key names over HTTP, on real node processes."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from coordinated.tools.localcluster import LocalCluster, LocalNode

pytestmark = pytest.mark.timeout(120)


def conflict_reason(status: int, body: object) -> str:
    assert status == 409 and isinstance(body, dict), (status, body)
    assert body["error"]["type"] == "version_conflict_engine_exception" and body["status"] == 409, body
    return str(body["error"]["reason"])


def test_versions_conditions_and_key_names_through_the_api(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    [node] = cluster.bootstrap(1)
    cluster.wait_master()

    status, created = node.put("/_cluster/metadata/locks/app-1?op_type=create", {"holder": "a"})
    assert status == 200, created
    status, body = node.get("/_cluster/metadata/locks%2Fapp-1")  # the same key
    assert status == 200 and body == {
        "key": "locks/app-1",
        "value": {"holder": "a"},
        "version": created["version"],
        "create_version": created["version"],
    }, body
    reason = conflict_reason(*node.put("/_cluster/metadata/locks/app-1?op_type=create", {"holder": "b"}))
    assert f"[{created['version']}]" in reason
    reason = conflict_reason(*node.put(f"/_cluster/metadata/locks/app-1?if_version={created['version'] + 7}", 1))
    assert f"current version [{created['version']}]" in reason
    status, updated = node.put(f"/_cluster/metadata/locks/app-1?if_version={created['version']}", {"holder": "b"})
    assert status == 200 and updated["version"] > created["version"], updated
    status, body = node.get("/_cluster/metadata/locks/app-1?local=true")
    assert (body["version"], body["create_version"]) == (updated["version"], created["version"]), body
    status, body = node.request("DELETE", f"/_cluster/metadata/locks/app-1?if_version={created['version']}")
    conflict_reason(status, body)
    status, _ = node.request("DELETE", f"/_cluster/metadata/locks/app-1?if_version={updated['version']}")
    assert status == 200 and node.get("/_cluster/metadata/locks/app-1")[0] == 404
    status, body = node.put("/_cluster/metadata/k?if_version=0", 1)  # if_version=0: create
    assert status == 200, body
    conflict_reason(*node.put("/_cluster/metadata/k?if_version=0", 2))

    for bad in ("_txn", "_reserved", "x" * 257, "a%0Ab"):
        status, body = node.put(f"/_cluster/metadata/{bad}", 1)
        assert status == 400 and body["error"]["type"] == "illegal_argument_exception", (bad, body)
    for query in ("if_version=-1", "if_version=x", "op_type=upsert", "op_type=create&if_version=3"):
        status, body = node.put(f"/_cluster/metadata/k?{query}", 1)
        assert status == 400, (query, body)
    assert node.get("/_cluster/metadata/k")[1]["value"] == 1


def test_transactions_through_the_api(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    cluster.wait_master()
    follower = next(node for node in nodes if node is not cluster.master())
    status, a = follower.put("/_cluster/metadata/a", 1)
    assert status == 200, a
    body = {
        "compare": [{"key": "a", "version": a["version"]}, {"key": "locks/b", "version": 0}],
        "success": [
            {"op": "put", "key": "locks/b", "value": {"x": 1}},
            {"op": "delete", "key": "a"},
            {"op": "get", "key": "locks/b"},
        ],
        "failure": [{"op": "get", "key": "a"}],
    }
    status, result = follower.request("POST", "/_cluster/metadata/_txn", body)
    assert status == 200, result
    version = result["version"]
    assert result == {
        "succeeded": True,
        "version": version,
        "results": [
            {"op": "put", "key": "locks/b", "version": version, "create_version": version},
            {"op": "delete", "key": "a", "deleted": True},
            {
                "op": "get",
                "key": "locks/b",
                "found": True,
                "value": {"x": 1},
                "version": version,
                "create_version": version,
            },
        ],
    }
    # Run again: the compares fail now, so the failure ops run, and nothing is written.
    status, again = follower.request("POST", "/_cluster/metadata/_txn", body)
    assert status == 200 and again == {
        "succeeded": False,
        "version": again["version"],
        "results": [{"op": "get", "key": "a", "found": False}],
    }, again
    assert again["version"] >= version
    status, b = nodes[0].get("/_cluster/metadata/locks/b")
    assert (b["value"], b["version"]) == ({"x": 1}, version)
    for bad in (
        {"success": [{"op": "put", "key": "k", "value": 1}, {"op": "put", "key": "k", "value": 2}]},
        {"success": [{"op": "get", "key": f"k{i}"} for i in range(65)]},
        {"success": [{"op": "increment", "key": "k"}]},
        {"succes": []},
        [1],
    ):
        status, error = follower.request("POST", "/_cluster/metadata/_txn", bad)
        assert status == 400, (bad, error)
    # `_txn` is an endpoint, never a key.
    assert follower.get("/_cluster/metadata/_txn")[0] == 400


def increment(node: LocalNode, key: str, acknowledged: list[int], stop: threading.Event, target: int) -> None:
    """Read-modify-write with compare-and-set until `target` increments are acknowledged by this worker."""
    mine = 0
    while mine < target and not stop.is_set():
        status, body = node.get(f"/_cluster/metadata/{key}")
        if status != 200:
            continue
        status, result = node.put(f"/_cluster/metadata/{key}?if_version={body['version']}", body["value"] + 1)
        if status == 200:
            mine += 1
            acknowledged.append(body["value"] + 1)
        elif status != 409:
            raise AssertionError(f"unexpected answer {status} {result}")


def test_concurrent_cas_counters_through_every_node_count_every_acknowledged_increment(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    cluster.wait_master()
    key = "counters/hits"
    assert nodes[0].put(f"/_cluster/metadata/{key}?op_type=create", 0)[0] == 200
    acknowledged: list[int] = []
    stop = threading.Event()
    per_worker = 15
    workers = [
        threading.Thread(target=increment, args=(node, key, acknowledged, stop, per_worker))
        for node in nodes
        for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=90)
    stop.set()
    assert not any(worker.is_alive() for worker in workers)
    assert len(acknowledged) == per_worker * len(workers)
    # Every acknowledged increment wrote a different value: none was lost to a concurrent one.
    assert sorted(acknowledged) == list(range(1, len(acknowledged) + 1))
    for node in nodes:
        status, body = node.get(f"/_cluster/metadata/{key}")
        assert status == 200 and body["value"] == len(acknowledged), body
