"""The client's failure rules, against scripted answers (httpx's MockTransport), for the blocking and the
asyncio client alike: what is retried, where, and when the caller is told the outcome is unknown instead."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from client_drivers import Driver

from coordinated.client import NoNodeAvailable, OutcomeUnknown, Unavailable, VersionConflict, operations
from coordinated.client.endpoints import from_environment
from coordinated.client.errors import AuthenticationError, ChangesGone


def error(status: int, error_type: str) -> httpx.Response:
    return httpx.Response(status, json={"error": {"type": error_type, "reason": "scripted"}, "status": status})


def page(version: int, keys: list[tuple[str, Any]], *, more: bool) -> dict[str, Any]:
    entries = [{"key": key, "value": value, "version": version, "create_version": version} for key, value in keys]
    return {"version": version, "keys": entries, "more": more, "next": keys[-1][0] if keys else None}


def written(key: str = "k", version: int = 7) -> httpx.Response:
    return httpx.Response(200, json={"key": key, "term": 1, "version": version})


class Script:
    """Answers in order, recording which host each request went to."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.hosts: list[str] = []
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path in ("/_cat/master", "/"):
            return httpx.Response(404, json={})  # no master following in these scripts
        self.hosts.append(f"{request.url.host}:{request.url.port}")
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


TWO = ["127.0.0.1:1", "127.0.0.1:2"]


def test_a_503_that_certainly_did_not_apply_is_retried_on_the_next_address(driver: Driver) -> None:
    script = Script(error(503, "cluster_block_exception"), written(version=9))
    client = driver.client(TWO, handler=script, token="t" * 20, retry_timeout=2.0)
    assert driver.run(client.cas("k", 1, version=3)).version == 9
    assert script.hosts == TWO
    assert script.requests[-1].url.params["if_version"] == "3"
    assert script.requests[-1].headers["Authorization"] == "Bearer " + "t" * 20


@pytest.mark.parametrize("lost", ["a 503 that may have applied", "no answer"])
def test_a_conditional_write_whose_outcome_is_unknown_is_not_retried(driver: Driver, lost: str) -> None:
    def answer() -> httpx.Response | Exception:
        if lost == "no answer":
            return httpx.ReadTimeout("lost")
        return error(503, "failed_to_commit_cluster_state_exception")

    script = Script(answer(), written())
    client = driver.client(TWO, handler=script, retry_timeout=2.0)
    with pytest.raises(OutcomeUnknown):
        driver.run(client.create("k", 1))
    assert len(script.hosts) == 1
    script = Script(answer(), written())
    client = driver.client(TWO, handler=script, retry_timeout=2.0)
    with pytest.raises(OutcomeUnknown):
        driver.run(client.txn([("k", 0)], [{"op": "put", "key": "k", "value": 1}]))
    assert len(script.hosts) == 1


def test_an_unconditional_write_and_a_read_are_retried_whatever_happened(driver: Driver) -> None:
    script = Script(
        error(503, "failed_to_commit_cluster_state_exception"),
        httpx.ReadTimeout("lost"),
        written(version=11),
    )
    client = driver.client(TWO, handler=script, retry_timeout=2.0)
    assert driver.run(client.put("k", 1)).version == 11
    assert script.hosts == [*TWO, TWO[0]]


def test_connection_refused_everywhere_gives_up_after_the_retry_time(driver: Driver) -> None:
    script = Script(*[httpx.ConnectError("refused") for _ in range(1000)])
    client = driver.client(["127.0.0.1:1"], handler=script, retry_timeout=0.3)
    with pytest.raises(NoNodeAvailable):
        driver.run(client.get("k"))
    assert 1 < len(script.hosts) < 1000  # retried, with pauses between the attempts
    script = Script(*[error(503, "cluster_block_exception") for _ in range(1000)])
    client = driver.client(["127.0.0.1:1"], handler=script, retry_timeout=0.3)
    with pytest.raises(Unavailable):
        driver.run(client.put("k", 1))


def test_a_node_without_a_master_says_more_than_the_addresses_that_do_not_answer(driver: Driver) -> None:
    """One live node without a master among dead addresses: the caller is told there is no master, by the node
    that said so, not that the last address tried could not be reached."""
    refused: list[httpx.Response | Exception] = [httpx.ConnectError("refused") for _ in range(200)]
    script = Script(error(503, "cluster_block_exception"), *refused)
    client = driver.client(TWO, handler=script, retry_timeout=0.5)
    with pytest.raises(Unavailable) as raised:
        driver.run(client.put("k", 1))
    assert raised.value.type == "cluster_block_exception" and raised.value.address == "http://127.0.0.1:1"
    assert len(script.hosts) > 2  # the attempts after the answer could not connect: no master is still what is said


def test_no_retry_time_means_one_attempt(driver: Driver) -> None:
    script = Script(error(503, "cluster_block_exception"), written())
    client = driver.client(TWO, handler=script, retry_timeout=0)
    with pytest.raises(Unavailable):
        driver.run(client.put("k", 1))
    assert len(script.hosts) == 1


@pytest.mark.parametrize(
    ("status", "error_type", "raised"),
    [
        (409, "version_conflict_engine_exception", VersionConflict),
        (403, "security_exception", AuthenticationError),
        (410, "resource_gone_exception", ChangesGone),
    ],
)
def test_errors_that_are_answers_are_raised_at_once(
    driver: Driver, status: int, error_type: str, raised: type[Exception]
) -> None:
    script = Script(error(status, error_type))
    client = driver.client(TWO, handler=script, retry_timeout=2.0)
    with pytest.raises(raised) as caught:
        driver.run(client.cas("k", 1, version=2))
    assert caught.value.type == error_type  # type: ignore[attr-defined]
    assert len(script.hosts) == 1


def test_a_long_poll_that_falls_behind_re_reads_the_prefix_and_resets(driver: Driver) -> None:
    script = Script(
        httpx.Response(
            200, json={"version": 12, "events": [{"type": "put", "key": "app/x", "value": 0, "version": 12}]}
        ),
        error(410, "resource_gone_exception"),
        httpx.Response(200, json=page(40, [("app/a", 1), ("app/b", 2)], more=False)),
    )
    client = driver.client(["127.0.0.1:1"], handler=script, retry_timeout=2.0)
    first = driver.run(client.watch_once("app/", 10, timeout=1))
    assert [(e.key, e.version) for e in first.events] == [("app/x", 12)]
    events, after = driver.run(client.run_flow(operations.next_events(client, "app/", 12, timeout=1)))
    assert [(e.type, e.key, e.version) for e in events] == [
        ("reset", "app/", 40),
        ("put", "app/a", 40),
        ("put", "app/b", 40),
    ]
    assert after == 40
    listing = script.requests[-1]
    assert listing.url.path == "/_cluster/metadata" and listing.url.params["prefix"] == "app/"


class TwoNodes:
    """Two sidecars, node-a at 127.0.0.1:1 and node-b (the master) at 127.0.0.1:2; `elections`: how many times
    `_cat/master` answers that there is no master yet before it names node-b. `sent`: where the writes went."""

    NAMES = {"127.0.0.1:1": "node-a", "127.0.0.1:2": "node-b"}

    def __init__(self, elections: int = 0) -> None:
        self.elections = elections
        self.sent: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        host = f"{request.url.host}:{request.url.port}"
        if request.url.path == "/_cat/master":
            if self.elections:
                self.elections -= 1
                return error(503, "master_not_discovered_exception")
            return httpx.Response(200, json=[{"id": "x", "node": "node-b", "host": "127.0.0.1"}])
        if request.url.path == "/":
            return httpx.Response(200, json={"name": self.NAMES[host]})
        self.sent.append(host)
        return written()


def test_the_master_is_found_among_the_addresses_and_used(driver: Driver) -> None:
    cluster = TwoNodes()
    client = driver.client(TWO, handler=cluster)
    driver.run(client.put("k", 1))
    driver.run(client.put("k", 2))
    assert cluster.sent == ["127.0.0.1:2", "127.0.0.1:2"]
    assert client.endpoints.current == "http://127.0.0.1:2"


def test_a_node_that_knew_no_master_yet_is_asked_again_at_the_next_call(driver: Driver) -> None:
    # During an election the node asked has no master yet; by the time the call itself reaches it, it has one
    # and forwards the write. The client must look again at its next call, not stay on a follower for good
    # (the failover integration test once found it there after a master kill).
    cluster = TwoNodes(elections=1)
    client = driver.client(TWO, handler=cluster)
    driver.run(client.put("k", 1))
    driver.run(client.put("k", 2))
    assert cluster.sent == ["127.0.0.1:1", "127.0.0.1:2"]
    assert client.endpoints.current == "http://127.0.0.1:2"


def test_master_timeout_goes_with_the_calls_that_take_it(driver: Driver) -> None:
    script = Script(written(), httpx.Response(200, json=[]))
    client = driver.client(["127.0.0.1:1"], handler=script, master_timeout=2.5)
    driver.run(client.put("k", 1))
    assert script.requests[0].url.params["master_timeout"] == "2500ms"


def test_addresses_and_token_from_the_pod_environment() -> None:
    assert from_environment({}) == (["http://127.0.0.1:9200"], None)
    env = {"COORDINATED_URL": "https://a:9200,https://b:9200", "COORDINATED_TOKEN": "secret"}
    assert from_environment(env) == (["https://a:9200", "https://b:9200"], "secret")
