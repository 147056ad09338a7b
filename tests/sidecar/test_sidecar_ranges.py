"""Range reads, prefix deletes, previous values and the richer transaction compares, over HTTP on real node
processes: pages in key order from one state version, continuations pinned to it while writes go on, 410
once the listing is not held, and the bounds and bad parameters answered with 400."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import pytest

from coordinated.tools.localcluster import LocalCluster, LocalNode

pytestmark = pytest.mark.timeout(120)


def listing(node: LocalNode, **params: Any) -> tuple[int, Any]:
    query = urlencode(
        {name: str(value).lower() if isinstance(value, bool) else value for name, value in params.items()}
    )
    return node.get(f"/_cluster/metadata?{query}")


def keys_of(body: dict[str, Any]) -> list[str]:
    return [entry["key"] for entry in body["keys"]]


def test_pages_come_from_one_version_while_writes_go_on(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master()
    assert master is not None
    follower = next(node for node in nodes if node is not master)
    third = next(node for node in nodes if node not in (master, follower))
    written = {f"app/{name}": index for index, name in enumerate(["e", "a", "d", "b", "c/1", "c"])}
    versions = {key: master.put(f"/_cluster/metadata/{key}", value)[1]["version"] for key, value in written.items()}
    master.put("/_cluster/metadata/apple", "not under app/")

    # Linearizable through a follower: every acknowledged write is there, in key order, with its versions.
    status, whole = listing(follower, prefix="app/")
    assert status == 200 and whole["more"] is False and whole["next"] == "app/e", whole
    assert keys_of(whole) == sorted(written)
    entry = whole["keys"][0]
    assert entry == {"key": "app/a", "value": 1, "version": versions["app/a"], "create_version": versions["app/a"]}
    assert whole["version"] >= max(versions.values())

    # Page by page, pinned to the first page's version: a key written meanwhile is not in it, a key deleted
    # meanwhile still is.
    status, first = listing(follower, prefix="app/", limit=2)
    assert status == 200 and keys_of(first) == ["app/a", "app/b"] and first["more"] and first["next"] == "app/b"
    master.put("/_cluster/metadata/app/bb", "written after the first page")
    master.request("DELETE", "/_cluster/metadata/app/d")
    pages = [first]
    while pages[-1]["more"]:
        status, page = listing(follower, prefix="app/", limit=2, after=pages[-1]["next"], at_version=first["version"])
        assert status == 200 and page["version"] == first["version"], page
        pages.append(page)
    assert [key for page in pages for key in keys_of(page)] == sorted(written)
    status, now = listing(follower, prefix="app/", keys_only=True)
    assert keys_of(now) == sorted({*written, "app/bb"} - {"app/d"}) and "value" not in now["keys"][0]

    # A node that did not serve the first page does not hold the listing once writes moved it on: 410.
    status, gone = listing(third, prefix="app/", limit=2, after=first["next"], at_version=first["version"])
    assert status == 410 and gone["error"]["type"] == "resource_gone_exception", gone
    assert "list again from the start" in gone["error"]["reason"]

    status, counted = listing(follower, prefix="app/", count_only=True)
    assert status == 200 and counted["count"] == len(now["keys"]) and set(counted) == {"version", "count"}
    status, local = listing(third, prefix="app/", local=True)
    assert status == 200 and keys_of(local) == keys_of(now)


def test_prefix_deletes_previous_values_compares_and_bad_parameters(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    [node] = cluster.bootstrap(1)
    cluster.wait_master()

    status, created = node.request("PUT", "/_cluster/metadata/cfg/a?prev_value=true", {"n": 1})
    assert status == 200 and created["prev"] is None, created
    status, replaced = node.request("PUT", "/_cluster/metadata/cfg/a?prev_value=true", {"n": 2})
    assert replaced["prev"] == {"value": {"n": 1}, "version": created["version"], "create_version": created["version"]}
    status, deleted = node.request("DELETE", "/_cluster/metadata/cfg/a?prev_value=true")
    assert status == 200 and deleted["prev"]["value"] == {"n": 2}, deleted

    for key in ("cfg/b", "cfg/c", "cfgx"):
        node.put(f"/_cluster/metadata/{key}", key)
    status, cleared = node.request("DELETE", "/_cluster/metadata?prefix=cfg/")
    assert status == 200 and cleared["deleted"] == 2 and cleared["prefix"] == "cfg/", cleared
    assert keys_of(listing(node, prefix="cfg")[1]) == ["cfgx"]
    status, nothing = node.request("DELETE", "/_cluster/metadata?prefix=cfg/")
    assert status == 200 and nothing["deleted"] == 0 and nothing["version"] == cleared["version"]

    node.put("/_cluster/metadata/counter", 5)
    txn = {
        "compare": [{"key": "counter", "value": 10, "op": "<"}, {"key": "cfgx", "create_version": 0, "op": ">"}],
        "success": [
            {"op": "put", "key": "counter", "value": 6, "prev_value": True},
            {"op": "delete_prefix", "prefix": "cfg"},
        ],
    }
    status, result = node.request("POST", "/_cluster/metadata/_txn", txn)
    assert status == 200 and result["succeeded"], result
    assert result["results"] == [
        {
            "op": "put",
            "key": "counter",
            "version": result["version"],
            "create_version": result["results"][0]["create_version"],
            "prev": {
                "value": 5,
                "version": result["results"][0]["create_version"],
                "create_version": result["results"][0]["create_version"],
            },
        },
        {"op": "delete_prefix", "prefix": "cfg", "deleted": 1, "more": False},
    ]

    bad: list[tuple[str, str, str]] = [
        ("GET", "/_cluster/metadata?limit=0", "[limit] must be at least 1"),
        ("GET", "/_cluster/metadata?limit=10001", "[limit] must be at most 10000"),
        ("GET", "/_cluster/metadata?prefix=_x", "reserved"),
        ("GET", "/_cluster/metadata?count_only=true&limit=5", "[count_only]"),
        ("GET", "/_cluster/metadata?at_version=x", "[at_version]"),
        ("GET", "/_cluster/metadata?recursive=true", "unrecognized parameter"),
        ("DELETE", "/_cluster/metadata", "needs [prefix]"),
        ("DELETE", "/_cluster/metadata?prefix=", "an empty [prefix] deletes every key: add [all=true]"),
        ("DELETE", "/_cluster/metadata?prefix=cfg&all=true", "takes no [prefix]"),
        ("DELETE", "/_cluster/metadata?prefix=&all=maybe", "[all]"),
        ("PUT", "/_cluster/metadata/k?prev_value=maybe", "[prev_value]"),
    ]
    for method, path, reason in bad:
        status, body = node.request(method, path)
        assert status == 400 and reason in body["error"]["reason"], (method, path, body)
    status, body = node.request("POST", "/_cluster/metadata/_txn", {"compare": [{"key": "k", "value": [1], "op": ">"}]})
    assert status == 400 and "give a number or a string" in body["error"]["reason"], body
