"""The client's failure rules, against scripted answers (httpx's MockTransport): what is retried, where,
and when the caller is told the outcome is unknown instead."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from coordinated.client import Client, NoNodeAvailable, OutcomeUnknown, Unavailable, VersionConflict
from coordinated.client.errors import AuthenticationError, ChangesGone

Handler = Callable[[httpx.Request], httpx.Response]


def client_with(handler: Handler, addresses: list[str], retry_timeout: float = 2.0) -> Client:
    client = Client(addresses, token="t" * 20, retry_timeout=retry_timeout)
    client._http = httpx.Client(transport=httpx.MockTransport(handler), headers={"Authorization": "Bearer tok"})
    return client


def error(status: int, error_type: str) -> httpx.Response:
    return httpx.Response(status, json={"error": {"type": error_type, "reason": "scripted"}, "status": status})


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


def test_a_503_that_certainly_did_not_apply_is_retried_on_the_next_address() -> None:
    script = Script(error(503, "cluster_block_exception"), written(version=9))
    client = client_with(script, ["127.0.0.1:1", "127.0.0.1:2"])
    assert client.cas("k", 1, version=3).version == 9
    assert script.hosts == ["127.0.0.1:1", "127.0.0.1:2"]
    assert script.requests[-1].url.params["if_version"] == "3"
    assert script.requests[-1].headers["Authorization"] == "Bearer tok"


def test_a_conditional_write_whose_outcome_is_unknown_is_not_retried() -> None:
    for answer in (error(503, "failed_to_commit_cluster_state_exception"), httpx.ReadTimeout("lost")):
        script = Script(answer, written())
        client = client_with(script, ["127.0.0.1:1", "127.0.0.1:2"])
        with pytest.raises(OutcomeUnknown):
            client.create("k", 1)
        assert len(script.hosts) == 1
        script = Script(answer, written())
        client = client_with(script, ["127.0.0.1:1", "127.0.0.1:2"])
        with pytest.raises(OutcomeUnknown):
            client.txn([("k", 0)], [{"op": "put", "key": "k", "value": 1}])
        assert len(script.hosts) == 1


def test_an_unconditional_write_and_a_read_are_retried_whatever_happened() -> None:
    script = Script(
        error(503, "failed_to_commit_cluster_state_exception"),
        httpx.ReadTimeout("lost"),
        written(version=11),
    )
    client = client_with(script, ["127.0.0.1:1", "127.0.0.1:2"])
    assert client.put("k", 1).version == 11
    assert script.hosts == ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:1"]


def test_connection_refused_everywhere_gives_up_after_the_retry_time() -> None:
    script = Script(*[httpx.ConnectError("refused") for _ in range(1000)])
    client = client_with(script, ["127.0.0.1:1"], retry_timeout=0.3)
    with pytest.raises(NoNodeAvailable):
        client.get("k")
    script = Script(*[error(503, "cluster_block_exception") for _ in range(1000)])
    client = client_with(script, ["127.0.0.1:1"], retry_timeout=0.3)
    with pytest.raises(Unavailable):
        client.put("k", 1)


def test_errors_that_are_answers_are_raised_at_once() -> None:
    for status, error_type, raised in (
        (409, "version_conflict_engine_exception", VersionConflict),
        (403, "security_exception", AuthenticationError),
        (410, "resource_gone_exception", ChangesGone),
    ):
        script = Script(error(status, error_type))
        client = client_with(script, ["127.0.0.1:1", "127.0.0.1:2"])
        with pytest.raises(raised) as caught:
            client.cas("k", 1, version=2)
        assert caught.value.type == error_type
        assert len(script.hosts) == 1


def test_a_watch_that_falls_behind_re_reads_and_resets() -> None:
    state: dict[str, Any] = {"version": 40, "metadata": {"kv": {"app/a": 1, "app/b": 2, "other": 3}}}
    script = Script(
        httpx.Response(
            200, json={"version": 12, "events": [{"type": "put", "key": "app/x", "value": 0, "version": 12}]}
        ),
        error(410, "resource_gone_exception"),
        httpx.Response(200, json=state),
        httpx.Response(200, json={"version": 41, "events": [{"type": "delete", "key": "app/a", "version": 41}]}),
    )
    client = client_with(script, ["127.0.0.1:1"])
    events = client.watch("app/", after_version=10)
    seen = [(e.type, e.key, e.version) for _, e in zip(range(5), events, strict=False)]
    assert seen == [
        ("put", "app/x", 12),
        ("reset", "app/", 40),
        ("put", "app/a", 40),
        ("put", "app/b", 40),
        ("delete", "app/a", 41),
    ]
    after = [request.url.params.get("after_version") for request in script.requests if "_watch" in request.url.path]
    assert after == ["10", "12", "40"]


def test_addresses_and_token_from_the_pod_environment() -> None:
    from coordinated.client.endpoints import from_environment

    assert from_environment({}) == (["http://127.0.0.1:9200"], None)
    env = {"COORDINATED_URL": "https://a:9200,https://b:9200", "COORDINATED_TOKEN": "secret"}
    assert from_environment(env) == (["https://a:9200", "https://b:9200"], "secret")
