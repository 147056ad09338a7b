"""Access control on real node processes: named principals of the tokens file, custom roles and role mappings in
the cluster state, enforced on every node for every kind of request (keys, transactions, range reads, prefix
deletes, watches and streams with several prefixes, sessions), the last writer of each key shown to admins,
revocations that close open streams and take effect on every node once acknowledged, quotas with their usage, and
the refusals: 400 naming the field, 401 with the reason (and never the token in a log), 403 naming what is
missing, 429 naming the quota and its limit."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from coordinated.tools.localcluster import LocalCluster, LocalNode, http

pytestmark = pytest.mark.timeout(180)

ADMIN = "admin-token-0123456789"
APP_A = "app-a-token-0123456789"
APP_B = "app-b-token-0123456789"
OLD_WRITER = "writer-token-0123456789"
TOKENS = f"admin {ADMIN}\nnone {APP_A} app-a\nnone {APP_B} app-b\nwriter {OLD_WRITER}\n"
ROLE_A = {"keys": [{"prefixes": ["app/a/"], "privileges": ["read", "write", "session"]}], "cluster": ["monitor"]}
ROLE_B = {"keys": [{"prefixes": ["app/b/"], "privileges": ["read", "write", "session"]}]}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def call(node: LocalNode, method: str, path: str, token: str | None, body: Any = None) -> tuple[int, Any]:
    return http(method, node.url + path, body, headers=bearer(token) if token else None)


def ok(answer: tuple[int, Any]) -> Any:
    status, body = answer
    assert status in (200, 201), answer
    return body


def refused(answer: tuple[int, Any], status: int, error_type: str, *words: str) -> str:
    got, body = answer
    assert got == status, answer
    assert body["error"]["type"] == error_type, body
    for word in words:
        assert word in body["error"]["reason"], (word, body)
    reason: str = body["error"]["reason"]
    return reason


@contextmanager
def stream(node: LocalNode, token: str, *prefixes: str, **params: Any) -> Iterator[Iterator[dict[str, Any]]]:
    query = [("stream", "true"), *(("prefix", prefix) for prefix in prefixes), *params.items()]
    with (
        httpx.Client(timeout=httpx.Timeout(60.0)) as client,
        client.stream(
            "GET", f"{node.url}/_cluster/metadata/_watch?{urlencode(query)}", headers=bearer(token)
        ) as response,
    ):
        if response.status_code != 200:
            yield iter([{"status": response.status_code, **json.loads(response.read())}])
            return
        yield (json.loads(line) for line in response.iter_lines() if line)


def until(lines: Iterator[dict[str, Any]], done: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    seen = []
    for line in lines:
        seen.append(line)
        if done(line):
            return seen
    raise AssertionError(f"the stream ended first: {seen}")


@pytest.fixture
def secured(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> tuple[LocalCluster, list[LocalNode]]:
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKENS)
    cluster = make_cluster(client_headers=bearer(ADMIN))
    cluster.settings["http.auth.tokens_file"] = str(tokens)
    cluster.settings["watch.stream.progress_interval"] = "200ms"
    nodes = cluster.bootstrap(3)
    return cluster, nodes


def test_principals_roles_and_mappings_on_every_kind_of_request(secured: tuple[LocalCluster, list[LocalNode]]) -> None:
    cluster, nodes = secured
    master = cluster.wait_master()
    follower = next(node for node in nodes if node is not master)

    # Who am I: a named line, a line of an old file (named after its role), and roles from mappings only.
    assert ok(call(follower, "GET", "/_security/_authenticate", APP_A)) == {
        "principal": "app-a",
        "realm": "file",
        "roles": [],
        "admin": False,
    }
    assert ok(call(follower, "GET", "/_security/_authenticate", OLD_WRITER))["principal"] == "writer"
    assert ok(call(follower, "GET", "/_security/_authenticate", ADMIN))["admin"] is True
    # Without a role, app-a may do nothing else.
    refused(call(follower, "GET", "/_cluster/metadata/app/a/x", APP_A), 403, "security_exception", "[read] on key")

    # Roles and mappings, through any node, acknowledged once every node has them.
    changed = ok(call(follower, "PUT", "/_security/role/app-a", ADMIN, ROLE_A))
    assert changed["role"] == {"created": True} and changed["acknowledged"] is True
    ok(call(master, "PUT", "/_security/role/app-b", ADMIN, ROLE_B))
    ok(call(master, "PUT", "/_security/role_mapping/app-a", ADMIN, {"roles": ["app-a"], "principals": ["app-a"]}))
    ok(call(master, "PUT", "/_security/role_mapping/apps", ADMIN, {"roles": ["app-b"], "principals": ["app-b*"]}))
    assert ok(call(follower, "GET", "/_security/_authenticate", APP_A))["roles"] == ["app-a"]
    assert set(ok(call(follower, "GET", "/_security/role", ADMIN))) == {"admin", "writer", "reader", "app-a", "app-b"}
    refused(call(follower, "GET", "/_security/role", APP_A), 403, "security_exception", "cluster privilege [security]")

    # Keys: each principal its own prefix, on every node.
    for node in nodes:
        ok(call(node, "PUT", f"/_cluster/metadata/app/a/{node.name}", APP_A, {"by": "a"}))
        refused(call(node, "PUT", f"/_cluster/metadata/app/b/{node.name}", APP_A, 1), 403, "security_exception")
        ok(call(node, "PUT", f"/_cluster/metadata/app/b/{node.name}", APP_B, {"by": "b"}))
        refused(call(node, "GET", f"/_cluster/metadata/app/b/{node.name}?local=true", APP_A), 403, "security_exception")
    # Range reads and prefix deletes: the whole prefix must be granted.
    assert len(ok(call(follower, "GET", "/_cluster/metadata?prefix=app/a/", APP_A))["keys"]) == 3
    refused(call(follower, "GET", "/_cluster/metadata?prefix=app/", APP_A), 403, "security_exception", "prefix [app/]")
    refused(call(follower, "DELETE", "/_cluster/metadata?prefix=app/", APP_A), 403, "security_exception")
    # Transactions: every compare and op of both branches.
    txn = {"compare": [{"key": "app/a/x", "version": 0}], "success": [{"op": "put", "key": "app/a/x", "value": 1}]}
    assert ok(call(follower, "POST", "/_cluster/metadata/_txn", APP_A, txn))["succeeded"] is True
    sneaky = {**txn, "failure": [{"op": "get", "key": "app/b/node-1"}]}
    refused(call(follower, "POST", "/_cluster/metadata/_txn", APP_A, sneaky), 403, "security_exception", "app/b/node-1")
    peek = {"compare": [{"key": "app/b/node-1", "value": {"by": "b"}}], "success": []}
    refused(call(follower, "POST", "/_cluster/metadata/_txn", APP_A, peek), 403, "security_exception")
    # Watches: each prefix of a stream; the long poll too.
    with stream(follower, APP_A, "app/a/", "app/b/") as lines:
        assert next(lines)["status"] == 403
    refused(
        call(follower, "GET", "/_cluster/metadata/_watch?prefix=app/b/&timeout=1s", APP_A), 403, "security_exception"
    )

    # The last writer of each key: shown to admins, not to others.
    assert ok(call(follower, "GET", "/_cluster/metadata/app/a/node-1", ADMIN))["writer"] == "app-a"
    assert ok(call(follower, "GET", "/_cluster/metadata/app/a/node-1?local=true", ADMIN))["writer"] == "app-a"
    assert "writer" not in ok(call(follower, "GET", "/_cluster/metadata/app/a/node-1", APP_A))
    listed = ok(call(follower, "GET", "/_cluster/metadata?prefix=app/", ADMIN))["keys"]
    assert {entry["key"]: entry["writer"] for entry in listed}["app/b/node-2"] == "app-b"

    # Sessions: a session belongs to its creator; its prefix is the creator's one prefix unless given.
    session = ok(call(follower, "POST", "/_sessions", APP_A, {"ttl": "30s"}))
    assert session["prefix"] == "app/a/" and session["owner"] == "app-a"
    refused(call(follower, "POST", "/_sessions", APP_A, {"ttl": "30s", "prefix": "app/"}), 403, "security_exception")
    path = f"/_sessions/{session['id']}"
    refused(call(follower, "PUT", f"{path}/_keepalive", APP_B), 403, "security_exception", "another principal")
    refused(call(master, "DELETE", path, APP_B), 403, "security_exception", "another principal")
    refused(
        call(follower, "PUT", f"/_cluster/metadata/app/b/lock?session={session['id']}", APP_B, 1),
        403,
        "security_exception",
        "own session",
    )
    ok(call(follower, "PUT", f"/_cluster/metadata/app/a/lock?session={session['id']}", APP_A, 1))
    assert [s["id"] for s in ok(call(follower, "GET", "/_sessions", APP_A))["sessions"]] == [session["id"]]
    assert ok(call(follower, "GET", "/_sessions", APP_B))["sessions"] == []
    ok(call(follower, "PUT", f"{path}/_keepalive", APP_A))
    ok(call(follower, "DELETE", path, APP_A))


def test_a_revocation_closes_open_streams_and_takes_effect_on_every_node_once_acknowledged(
    secured: tuple[LocalCluster, list[LocalNode]],
) -> None:
    cluster, nodes = secured
    master = cluster.wait_master()
    followers = [node for node in nodes if node is not master]
    ok(call(master, "PUT", "/_security/role/app-a", ADMIN, ROLE_A))
    ok(call(master, "PUT", "/_security/role_mapping/app-a", ADMIN, {"roles": ["app-a"], "principals": ["app-a"]}))
    ok(call(master, "PUT", "/_cluster/metadata/app/a/x", APP_A, 1))
    with stream(followers[0], APP_A, "app/a/", local="true") as lines:
        until(lines, lambda line: line["type"] == "progress")
        revoked = ok(call(followers[1], "DELETE", "/_security/role_mapping/app-a", ADMIN))
        assert revoked == {"found": True, "acknowledged": True, "version": revoked["version"]}
        # Acknowledged: no node serves app-a any more, even from its own applied state.
        for node in nodes:
            refused(call(node, "GET", "/_cluster/metadata/app/a/x?local=true", APP_A), 403, "security_exception")
        closed = until(lines, lambda line: line["type"] == "closed")[-1]
        assert "principal [app-a] may no longer read these keys" in closed["reason"], closed
    refused(call(master, "DELETE", "/_security/role_mapping/app-a", ADMIN), 404, "resource_not_found_exception")


def test_quotas_and_their_usage(secured: tuple[LocalCluster, list[LocalNode]]) -> None:
    cluster, nodes = secured
    master = cluster.wait_master()
    follower = next(node for node in nodes if node is not master)
    ok(call(master, "PUT", "/_security/role/app-a", ADMIN, ROLE_A))
    ok(call(master, "PUT", "/_security/role_mapping/app-a", ADMIN, {"roles": ["app-a"], "principals": ["app-a"]}))
    for n in range(3):
        ok(call(follower, "PUT", f"/_cluster/metadata/app/a/{n}", APP_A, n))
    limits = {"prefix": "app/a/", "max_keys": 2, "max_watch_streams": 1}
    refused(call(master, "PUT", "/_quota/a", ADMIN, limits), 400, "illegal_argument_exception", "[max_keys]", "([3])")
    ok(http("PUT", f"{master.url}/_quota/a?force=true", limits, headers=bearer(ADMIN)))
    reason = refused(call(follower, "PUT", "/_cluster/metadata/app/a/9", APP_A, 1), 429, "quota_exceeded_exception")
    assert "quota [a]" in reason and "[max_keys] is [2]" in reason
    ok(call(follower, "PUT", "/_cluster/metadata/app/a/0", APP_A, "overwrite"))  # no growth
    ok(call(follower, "DELETE", "/_cluster/metadata/app/a/1", APP_A))
    ok(call(follower, "DELETE", "/_cluster/metadata/app/a/2", APP_A))
    ok(call(follower, "PUT", "/_cluster/metadata/app/a/9", APP_A, 1))  # room again: 2 of 2
    usage = ok(call(follower, "GET", "/_quota/a", APP_A))["a"]
    assert usage["max_keys"] == 2 and usage["usage"]["keys"] == 2
    metrics = ok(call(follower, "GET", "/metrics", ADMIN))
    for name, value in (("coordinated_quota_limit", 2.0), ("coordinated_quota_used", 2.0)):
        assert f'{name}{{limit="max_keys",prefix="app/a/",quota="a"}} {value}' in metrics, metrics
    # Watch streams: each node holds its own to the limit.
    with stream(follower, APP_A, "app/a/") as first:
        until(first, lambda line: line["type"] == "progress")
        with stream(follower, APP_A, "app/a/x") as second:
            assert next(second)["status"] == 429
        assert ok(call(follower, "GET", "/_quota/a", APP_A))["a"]["usage"]["watch_streams"] == 1
        with stream(master, APP_A, "app/a/") as elsewhere:
            until(elsewhere, lambda line: line["type"] == "progress")
    # Bad input names the field.
    bad_role = {"keys": [{"prefixes": ["app/a/"], "privileges": ["reed"]}]}
    refused(call(master, "PUT", "/_security/role/r", ADMIN, bad_role), 400, "illegal_argument_exception", "keys[0]")
    bad_prefix = {"keys": [{"prefixes": ["_x"], "privileges": ["read"]}]}
    refused(
        call(master, "PUT", "/_security/role/r", ADMIN, bad_prefix),
        400,
        "illegal_argument_exception",
        "[keys[0].prefixes[0]]: invalid prefix",
    )
    refused(call(master, "PUT", "/_security/role/admin", ADMIN, ROLE_A), 400, "illegal_argument_exception", "built in")
    refused(call(master, "PUT", "/_quota/q", ADMIN, {"prefix": "x/", "max_keys": -1}), 400, "x_content_parse_exception")
    refused(call(master, "PUT", "/_security/role_mapping/m", ADMIN, {"roles": []}), 400, "x_content_parse_exception")


def test_bad_credentials_get_401_with_the_reason_and_no_token_reaches_a_log(
    secured: tuple[LocalCluster, list[LocalNode]],
) -> None:
    cluster, nodes = secured
    node = cluster.wait_master()
    wrong = "wrong-token-0123456789abcdef"
    refused(call(node, "GET", "/_cluster/health", None), 401, "security_exception", "missing authentication")
    refused(call(node, "GET", "/_cluster/health", wrong), 401, "security_exception", "unable to authenticate")
    status, body = http("GET", node.url + "/_cluster/health", headers={"Authorization": f"Basic {wrong}"})
    assert status == 401 and "use Bearer" in body["error"]["reason"]
    for other in nodes:
        assert other.log_path is not None
        log = other.log_path.read_text()
        for token in (ADMIN, APP_A, APP_B, OLD_WRITER, wrong):
            assert token not in log


def test_writes_racing_a_revocation_are_acknowledged_before_it_or_refused(
    secured: tuple[LocalCluster, list[LocalNode]],
) -> None:
    """Writers of the principal through every node while the admin revokes its mapping: every write it acknowledged
    is in a state no later than the revocation's, and every write sent after the revocation's answer is refused."""
    cluster, nodes = secured
    master = cluster.wait_master()
    ok(call(master, "PUT", "/_security/role/app-a", ADMIN, ROLE_A))
    ok(call(master, "PUT", "/_security/role_mapping/app-a", ADMIN, {"roles": ["app-a"], "principals": ["app-a"]}))
    acknowledged: list[int] = []
    after_answer: list[int] = []  # statuses of the writes sent after the revocation answered
    revoked = threading.Event()
    stop = threading.Event()

    def write(index: int) -> None:
        node, sequence = nodes[index % len(nodes)], 0
        while not stop.is_set():
            sequence += 1
            sent_after = revoked.is_set()
            status, body = call(node, "PUT", f"/_cluster/metadata/app/a/{index}-{sequence}", APP_A, sequence)
            if status == 200:
                acknowledged.append(body["version"])
            if sent_after:
                after_answer.append(status)
            if sent_after and len(after_answer) > 60:
                return

    threads = [threading.Thread(target=write, args=(index,)) for index in range(6)]
    for thread in threads:
        thread.start()
    try:
        while len(acknowledged) < 30:
            threading.Event().wait(0.01)
        answer = ok(call(nodes[1], "DELETE", "/_security/role_mapping/app-a", ADMIN))
        revoked.set()
        assert answer["acknowledged"] is True
    finally:
        for thread in threads:
            thread.join(timeout=60)
        stop.set()
    assert acknowledged and max(acknowledged) <= answer["version"], (max(acknowledged), answer)
    assert after_answer and set(after_answer) == {403}, after_answer


def test_roles_mappings_and_quotas_are_in_snapshots_and_a_restore_brings_them_back(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKENS)
    cluster = make_cluster(client_headers=bearer(ADMIN))
    cluster.settings.update({"http.auth.tokens_file": str(tokens), "path.repo": str(tmp_path / "repos")})
    (node,) = cluster.bootstrap(1)
    ok(call(node, "PUT", "/_security/role/app-a", ADMIN, ROLE_A))
    ok(call(node, "PUT", "/_security/role_mapping/app-a", ADMIN, {"roles": ["app-a"], "principals": ["app-a"]}))
    ok(call(node, "PUT", "/_quota/a", ADMIN, {"prefix": "app/a/", "max_keys": 5}))
    ok(call(node, "PUT", "/_cluster/metadata/app/a/x", APP_A, 1))
    repository = {"type": "fs", "settings": {"location": str(tmp_path / "repos" / "r")}}
    ok(call(node, "PUT", "/_snapshot/r", ADMIN, repository))
    ok(call(node, "PUT", "/_snapshot/r/s?wait_for_completion=true", ADMIN))
    ok(call(node, "DELETE", "/_security/role_mapping/app-a", ADMIN))
    ok(call(node, "DELETE", "/_quota/a", ADMIN))
    refused(call(node, "GET", "/_cluster/metadata/app/a/x", APP_A), 403, "security_exception")
    ok(call(node, "POST", "/_snapshot/r/s/_restore", ADMIN))
    assert ok(call(node, "GET", "/_cluster/metadata/app/a/x", APP_A))["value"] == 1
    assert ok(call(node, "GET", "/_quota/a", ADMIN))["a"]["usage"]["keys"] == 1
    # The restore wrote every key: its principal is their last writer.
    assert ok(call(node, "GET", "/_cluster/metadata/app/a/x", ADMIN))["writer"] == "admin"


def test_a_token_taken_out_of_the_tokens_file_ends_its_principals_open_streams(
    secured: tuple[LocalCluster, list[LocalNode]], tmp_path: Path
) -> None:
    cluster, nodes = secured
    master = cluster.wait_master()
    ok(call(master, "PUT", "/_security/role/app-a", ADMIN, ROLE_A))
    ok(call(master, "PUT", "/_security/role_mapping/app-a", ADMIN, {"roles": ["app-a"], "principals": ["app-a"]}))
    tokens = Path(cluster.settings["http.auth.tokens_file"])
    with stream(nodes[0], APP_A, "app/a/", local="true") as lines:
        until(lines, lambda line: line["type"] == "progress")
        replacement = tmp_path / "tokens.new"
        replacement.write_text(TOKENS.replace(f"none {APP_A} app-a\n", ""))
        replacement.rename(tokens)  # atomically, as a Secret volume does
        # The node looks at the file at most once a second, as requests (the kubelet's probes) come.
        for _ in range(100):
            http("GET", nodes[0].url + "/readyz")
            threading.Event().wait(0.1)
            if call(nodes[0], "GET", "/_security/_authenticate", APP_A)[0] == 401:
                break
        closed = until(lines, lambda line: line["type"] == "closed")[-1]
        assert "principal [app-a] may no longer watch: its token is no longer in the tokens file" in closed["reason"]
