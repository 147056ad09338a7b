"""Key names on a real node: the server refuses every rule's names with a 400 that names the rule, through
the path, a transaction and a watch's prefix, sent byte for byte (no client library in the way); and any
name the server accepts round-trips byte for byte through the client, blocking and asyncio (hypothesis),
while the client refuses exactly the names the server refuses."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from client_drivers import Driver
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_key_names import BROKEN, KEPT, NAME_CHARACTERS

from coordinated.client import InvalidKey, NotFound
from coordinated.key_names import key_problem
from coordinated.tools.localcluster import LocalCluster, LocalNode

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalNode]:
    cluster = LocalCluster(Path(tmp_path_factory.mktemp("keys")))
    try:
        cluster.bootstrap(1)
        yield cluster.wait_master()
    finally:
        cluster.stop_all(graceful=False)


def raw(node: LocalNode, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """One request with exactly this path on the wire: http.client neither normalizes nor re-encodes it."""
    address = urlsplit(node.url)
    connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=10)
    try:
        payload = None if body is None else json.dumps(body).encode()
        headers = {} if payload is None else {"Content-Type": "application/json"}
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        text = response.read().decode()
        return response.status, json.loads(text) if text else None
    finally:
        connection.close()


def encoded(name: str) -> str:
    """`name` in a path, every byte that is not unreserved percent-encoded except `/`; a lone surrogate
    (which UTF-8 cannot carry) as the bytes Python would write for it."""
    return quote(name.encode("utf-8", "surrogatepass"), safe="/")


def refusal(status: int, body: Any) -> str:
    assert status == 400, (status, body)
    return str(body["error"]["reason"])


def has_surrogate(name: str) -> bool:
    return any(0xD800 <= ord(char) <= 0xDFFF for char in name)


def refuses_body(reason: str, rule_or_problem: str, name: str) -> bool:
    """Whether a refused body names the rule. A lone surrogate never reaches the key rules through the API:
    the JSON decoder refuses it first, naming it (and the path cannot carry it: it is not UTF-8)."""
    if has_surrogate(name):
        return "surrogate" in reason
    return rule_or_problem in reason


BROKEN_NAMES = [(rule, name) for rule, names in BROKEN.items() for name in names]


@pytest.mark.parametrize(("rule", "name"), BROKEN_NAMES)
def test_the_server_refuses_a_name_naming_the_rule(node: LocalNode, rule: str, name: str) -> None:
    if name and rule != "no surrogates":  # an empty name has no path of its own, and UTF-8 has no surrogate
        assert f"[{rule}]" in refusal(*raw(node, "PUT", "/_cluster/metadata/" + encoded(name), 1))
    elif name:
        assert "not UTF-8" in refusal(*raw(node, "PUT", "/_cluster/metadata/" + encoded(name), 1))
    # In a body the name arrives whole (JSON escapes what it must).
    txn = {"compare": [], "success": [{"op": "put", "key": name, "value": 1}], "failure": []}
    assert refuses_body(refusal(*raw(node, "POST", "/_cluster/metadata/_txn", txn)), f"[{rule}]", name)
    txn = {"compare": [{"key": name, "version": 0}], "success": [], "failure": []}
    assert refuses_body(refusal(*raw(node, "POST", "/_cluster/metadata/_txn", txn)), f"[{rule}]", name)


@pytest.mark.parametrize(
    ("rule", "prefix"),
    [(rule, BROKEN[rule][0]) for rule in BROKEN if rule.startswith("no") and "segments" not in rule],
)
def test_a_watch_prefix_follows_the_character_rules(node: LocalNode, rule: str, prefix: str) -> None:
    path = "/_cluster/metadata/_watch?timeout=0s&prefix=" + quote(prefix.encode("utf-8", "surrogatepass"), safe="")
    reason = refusal(*raw(node, "GET", path))
    assert f"[{rule}]" in reason or ("not UTF-8" in reason and rule == "no surrogates") or "reserved" in reason


def test_what_the_issue_found_is_refused_and_nothing_is_rewritten(node: LocalNode, driver: Driver) -> None:
    client = driver.client(node.url)
    for name in ("locks/../config/app", "a/./b"):
        with pytest.raises(InvalidKey):
            driver.run(client.put(name, "x"))
        assert "dot segments" in refusal(*raw(node, "PUT", "/_cluster/metadata/" + name, "x"))
    for rewritten in ("config/app", "a/b", "locks/config/app"):
        with pytest.raises(NotFound):
            driver.run(client.get(rewritten))
    written = driver.run(client.put("x%2Fy", "percent"))
    assert written.key == "x%2Fy"
    assert driver.run(client.get("x%2Fy")).value == "percent"
    with pytest.raises(NotFound):
        driver.run(client.get("x/y"))  # another key
    assert raw(node, "GET", "/_cluster/metadata/x%252Fy")[1]["key"] == "x%2Fy"
    assert raw(node, "GET", "/_cluster/metadata/x%2Fy")[0] == 404  # %2F is `/`: the key x/y
    driver.close(client)


def round_trip(driver: Driver, client: Any, node: LocalNode, name: str, value: Any) -> None:
    """`name` through every call that names a key, compared byte for byte; or refused by client and server
    alike, naming the same rule."""
    problem = key_problem(name)
    if problem is not None:
        with pytest.raises(InvalidKey) as refused:
            driver.run(client.put(name, value))
        assert str(refused.value) == problem
        txn = {"compare": [], "success": [{"op": "put", "key": name, "value": value}], "failure": []}
        assert refuses_body(refusal(*raw(node, "POST", "/_cluster/metadata/_txn", txn)), problem, name)
        return
    written = driver.run(client.put(name, value))
    assert written.key.encode() == name.encode()
    read = driver.run(client.get(name))
    assert (read.key.encode(), read.value, read.version) == (name.encode(), value, written.version)
    assert driver.run(client.get(name, local=True)).value == value
    batch = driver.run(client.watch_once(name, written.version - 1, timeout=0))
    assert any(e.key.encode() == name.encode() and e.version == written.version for e in batch.events)
    state = driver.run(client.cluster_state())
    assert state["metadata"]["kv"][name] == value
    deleted = driver.run(client.delete(name, if_version=written.version))
    assert deleted.key.encode() == name.encode()


@pytest.fixture
def client(driver: Driver, node: LocalNode) -> Iterator[Any]:
    client = driver.client(node.url)
    yield client
    driver.close(client)


def test_chosen_names_round_trip_or_are_refused(node: LocalNode, driver: Driver, client: Any) -> None:
    for name in KEPT + [name for _, name in BROKEN_NAMES]:
        round_trip(driver, client, node, name, {"name": name})


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.text(NAME_CHARACTERS, min_size=0, max_size=24))
def test_any_name_round_trips_or_is_refused(node: LocalNode, driver: Driver, client: Any, name: str) -> None:
    round_trip(driver, client, node, name, [name, len(name)])
