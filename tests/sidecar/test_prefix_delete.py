"""Prefix deletes on a real node: at most MAX_PREFIX_DELETE keys in one committed state, with `more` while keys are
left under the prefix (the caller calls again), through the HTTP API, the transaction op and the Python client;
and an empty prefix, which deletes every key, only when the call says `all=true`."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from coordinated.client import delete_prefix_op
from coordinated.coordination.requests.keys import MAX_PREFIX_DELETE
from coordinated.coordination.requests.transactions import MAX_TXN_OPS
from coordinated.tools.localcluster import LocalCluster, LocalNode

KEYS = 2 * MAX_PREFIX_DELETE + 500


def fill(node: LocalNode, prefix: str, count: int) -> None:
    client = node.client()
    for start in range(0, count, MAX_TXN_OPS):
        ops = [
            {"op": "put", "key": f"{prefix}{i:06d}", "value": i} for i in range(start, min(count, start + MAX_TXN_OPS))
        ]
        status, body = node.request("POST", "/_cluster/metadata/_txn", {"success": ops})
        assert status == 200, body
    assert client.count(prefix).count == count


def test_a_prefix_delete_takes_at_most_its_limit_per_call_and_says_more(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = make_cluster()
    [node] = cluster.bootstrap(1)
    fill(node, "big/", KEYS)
    node.put("/_cluster/metadata/bigger", 1)  # beside the prefix: never touched
    answers = []
    while True:
        status, body = node.request("DELETE", "/_cluster/metadata?prefix=big/")
        assert status == 200, body
        answers.append(body)
        if not body["more"]:
            break
    assert [a["deleted"] for a in answers] == [MAX_PREFIX_DELETE, MAX_PREFIX_DELETE, 500]
    assert [a["more"] for a in answers] == [True, True, False]
    assert len({a["version"] for a in answers}) == 3, "each call one committed state of its own"
    client = node.client()
    assert client.count("big/").count == 0 and client.get("bigger").value == 1
    # The first keys in key order go first: what is left after one call is the rest, in order.
    fill(node, "big/", MAX_PREFIX_DELETE + 3)
    status, body = node.request("DELETE", "/_cluster/metadata?prefix=big/")
    assert (body["deleted"], body["more"]) == (MAX_PREFIX_DELETE, True)
    assert [k.key for k in client.list_prefix("big/").keys] == [
        f"big/{i:06d}" for i in range(MAX_PREFIX_DELETE, MAX_PREFIX_DELETE + 3)
    ]
    # The Python client follows `more` until nothing is left.
    fill(node, "big/", KEYS)
    assert client.delete_prefix("big/").deleted == KEYS and client.count("big/").count == 0


def test_a_delete_prefix_op_of_a_transaction_is_limited_too(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    [node] = cluster.bootstrap(1)
    fill(node, "job/", MAX_PREFIX_DELETE + 10)
    txn = {"compare": [{"key": "lock", "version": 0}], "success": [delete_prefix_op("job/")]}
    status, body = node.request("POST", "/_cluster/metadata/_txn", txn)
    assert status == 200 and body["succeeded"], body
    assert body["results"] == [{"op": "delete_prefix", "prefix": "job/", "deleted": MAX_PREFIX_DELETE, "more": True}]
    status, body = node.request("POST", "/_cluster/metadata/_txn", txn)
    assert body["results"] == [{"op": "delete_prefix", "prefix": "job/", "deleted": 10, "more": False}]


def test_an_empty_prefix_deletes_every_key_only_when_the_call_says_all(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = make_cluster()
    [node] = cluster.bootstrap(1)
    for key in ("a", "b/c"):
        node.put(f"/_cluster/metadata/{key}", key)
    status, body = node.request("DELETE", "/_cluster/metadata?prefix=")  # PREFIX unset in "prefix=$PREFIX"
    assert status == 400 and "add [all=true]" in body["error"]["reason"], body
    wipe = {"success": [{"op": "delete_prefix", "prefix": ""}]}
    status, body = node.request("POST", "/_cluster/metadata/_txn", wipe)
    assert status == 400 and "[all=true] to the URL" in body["error"]["reason"], body
    assert node.client().count("").count == 2, "nothing was deleted"
    status, body = node.request("POST", "/_cluster/metadata/_txn?all=true", wipe)
    assert status == 200 and body["results"][0]["deleted"] == 2, body
    node.put("/_cluster/metadata/again", 1)
    status, body = node.request("DELETE", "/_cluster/metadata?all=true")
    assert status == 200 and (body["prefix"], body["deleted"], body["more"]) == ("", 1, False), body


def test_the_documented_prefix_delete_answers_as_docs_applications_md_shows(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    text = (Path(__file__).parents[2] / "docs" / "applications.md").read_text()
    section = text[text.index("## Deleting a prefix") :]
    command, shown = re.search(r'\$ curl -s -X DELETE "\$ES(\S+)"\n(\{.*\})\n', section).groups()  # type: ignore[union-attr]
    documented = json.loads(shown)
    cluster = make_cluster()
    [node] = cluster.bootstrap(1)
    for key in ("config/a", "config/b", "config/c/d", "configuration"):
        node.put(f"/_cluster/metadata/{key}", 1)
    status, answer = node.request("DELETE", command)
    assert status == 200 and set(answer) == set(documented), (answer, documented)
    assert {k: answer[k] for k in ("prefix", "deleted", "more")} == {
        k: documented[k] for k in ("prefix", "deleted", "more")
    }
