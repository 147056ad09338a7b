"""The value-size and state-size ceilings over HTTP: a 400 in Elasticsearch's error shape naming the limit."""

from __future__ import annotations

from collections.abc import Callable

from coordinated.tools.localcluster import LocalCluster


def test_value_and_state_ceilings_answer_400_naming_the_limit_and_the_sizes(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = make_cluster()
    (node,) = cluster.bootstrap(1)
    status, _ = node.put(
        "/_cluster/settings",
        {"persistent": {"cluster.metadata.max_value_size": "100b", "cluster.metadata.max_state_size": "1kb"}},
    )
    assert status == 200
    status, body = node.put("/_cluster/metadata/big", "x" * 200)
    assert status == 400, body
    assert body["status"] == 400 and body["error"]["type"] == "illegal_argument_exception"
    assert "[202] bytes" in body["error"]["reason"] and "[cluster.metadata.max_value_size]" in body["error"]["reason"]
    for index in range(10):  # each key costs 2 + 92 bytes: ten fit in 1kb, not eleven
        assert node.put(f"/_cluster/metadata/k{index}", "y" * 90)[0] == 200
    status, body = node.put("/_cluster/metadata/k10", "y" * 90)
    assert status == 400, body
    assert "[1024] bytes set by [cluster.metadata.max_state_size]" in body["error"]["reason"]
    _, state = node.get("/_cluster/state")
    assert "k10" not in state["metadata"]["kv"] and "big" not in state["metadata"]["kv"]
