"""Query parameters the API fuzzer (test_api_fuzzing.py) found accepted although they break the document: each
is now refused with a 400 in the error shape, before the handler touches the node."""

from __future__ import annotations

import asyncio
import types

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from coordinated.sidecar.observability.metrics import NodeMetrics
from coordinated.sidecar.web.app import ServedRoutes
from coordinated.sidecar.web.app_keys import NODE_KEY
from coordinated.sidecar.web.errors import errors_middleware

REFUSED = [
    # Documented booleans that were never parsed, so any value passed.
    ("GET", "/_cat/master?local=AAA", "local"),
    ("GET", "/_cat/master?format=json&v=maybe", "v"),
    ("GET", "/_cluster/settings?local=AAA", "local"),
    ("GET", "/_cluster/settings?include_defaults=1", "include_defaults"),
    ("GET", "/_cluster/settings?flat_settings=yes", "flat_settings"),
    ("PUT", "/_cluster/settings?flat_settings=yes", "flat_settings"),
    ("GET", "/_snapshot/repo/snap?verbose=x", "verbose"),
    ("GET", "/_snapshot/repo/_all?ignore_unavailable=x", "ignore_unavailable"),
    # Timeouts that were parsed only when the request waited for the master.
    ("GET", "/_cluster/state?local=true&master_timeout=%C3%A9", "master_timeout"),
    ("GET", "/_sessions?local=&timeout=", "timeout"),
    ("GET", "/_snapshot?local=true&master_timeout=soon", "master_timeout"),
    ("GET", "/_cluster/health?master_timeout=soon", "master_timeout"),
    # Counts beyond a long, or not plain ASCII digits, which int() took.
    ("GET", "/_history?size=9223372036854775808", "size"),
    ("GET", "/_history?after_seq=%2B5", "after_seq"),
    ("GET", "/_history?after_seq=1_000", "after_seq"),
    ("GET", "/_history?after_seq=%D9%A5", "after_seq"),  # ARABIC-INDIC DIGIT FIVE
    ("GET", "/_history?size=%205", "size"),
    ("GET", "/_cluster/state?wait_for_version=%2B1", "wait_for_version"),
    ("GET", "/_cluster/metadata/_watch?after_version=9223372036854775808", "after_version"),
]


@pytest.mark.parametrize(("method", "path", "param"), REFUSED)
def test_a_malformed_parameter_is_refused_with_the_error_shape(method: str, path: str, param: str) -> None:
    status, body = asyncio.run(request(method, path))
    assert status == 400, body
    assert body["status"] == 400 and body["error"]["type"] == "illegal_argument_exception", body
    assert f"[{param}]" in body["error"]["reason"], body


async def request(method: str, path: str) -> tuple[int, dict[str, object]]:
    # Only the middleware's metrics are reached: every one of these requests is refused before the node is.
    stand_in = types.SimpleNamespace(metrics=NodeMetrics(lambda: None))
    app = web.Application(middlewares=[errors_middleware])
    app[NODE_KEY] = stand_in  # type: ignore[misc]
    ServedRoutes().register(app.router)
    async with TestClient(TestServer(app)) as client:
        response = await client.request(method, path, json={"persistent": {}} if method == "PUT" else None)
        return response.status, await response.json()
