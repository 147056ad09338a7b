"""The client port under hostile input: malformed HTTP, invalid UTF-8, slow or idle connections, and the
peer port's POST route on a real node."""

from __future__ import annotations

import asyncio
import json
import socket
import types
from collections.abc import Callable
from typing import Any

import aiohttp
import msgspec
import pytest
from aiohttp import web

from coordinated.coordination.counters import LONG_MAX
from coordinated.coordination.messages import Envelope, ForwardedRequest, encode_envelope
from coordinated.coordination.requests.cluster import UpdateSettings
from coordinated.coordination.requests.keys import KvPut
from coordinated.coordination.state import DiscoveryNode
from coordinated.sidecar.observability.metrics import NodeMetrics
from coordinated.sidecar.web import app_keys, errors, http_server
from coordinated.tools.localcluster import LocalCluster, free_ports, http

pytestmark = pytest.mark.timeout(120)


def raw_request(port: int, data: bytes, timeout: float = 10.0) -> tuple[int, Any]:
    """Send raw bytes; (status, decoded JSON body) of the answer, read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)


MALFORMED = [
    (b"GET /_cluster/health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", "too_long_http_line"),
    (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", "too_long_http_line"),
    (b"GET /_cluster/health?local=\xff HTTP/1.1\r\nHost: x\r\n\r\n", "bad_request"),
    (b"NOT HTTP AT ALL\r\n\r\n", "bad_request"),
    (b"GET / HTTP/1.1\r\n" + b"".join(b"X-H%d: 1\r\n" % i for i in range(200)) + b"\r\n", "bad_request"),
]


def utf8_body(method: str, path: str, body: bytes) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"Connection: close\r\n\r\n" + body


def test_hostile_http_gets_elasticsearch_errors_and_one_log_line(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    (node,) = cluster.bootstrap(1)
    for data, error_type in MALFORMED:
        status, answer = raw_request(node.http_port, data)
        assert status == 400 and answer["status"] == 400, answer
        assert answer["error"]["type"] == f"{error_type}_exception" and answer["error"]["reason"], answer
    for method, path, body in [
        ("PUT", "/_cluster/metadata/k", b'"caf\xc3\xa9 \xff\xfe"'),
        ("PUT", "/_cluster/settings", b'{"persistent": {"cluster.publish.timeout\xff": "1s"}}'),
        ("PUT", "/_hooks/h", b'{"url": "http://127.0.0.1:1/\xff"}'),
    ]:
        status, answer = raw_request(node.http_port, utf8_body(method, path, body))
        assert status == 400 and answer["error"]["type"] == "parse_exception", answer
        assert "UTF-8" in answer["error"]["reason"]
    # The peer port's POST route: a term beyond a long, and invalid UTF-8.
    candidate = msgspec.json.encode(DiscoveryNode("x", "x", "127.0.0.1:1")).decode()
    start_join = f'{{"sender":"127.0.0.1:1","message":{{"type":"start_join","candidate":{candidate},"term":{{}}}}}}'
    for body in [
        start_join.replace("{}", "9" * 4300).encode(),
        start_join.replace("{}", str(LONG_MAX + 1)).encode(),
        b'{"sender":"127.0.0.1:1\xff","message":{"type":"leader_check","source_id":"a","request_id":1}}',
    ]:
        status, answer = http("POST", f"http://{node.transport_address}/_transport/message", raw=body)
        assert status == 400 and answer["error"]["type"] == "parse_exception", answer
    assert node.get("/")[1]["term"] < 10  # nothing was persisted: the node can still be elected
    # A forged peer forwards requests that the API would refuse: the master refuses them too.
    for request in [
        KvPut("bad\x07key\n", 1),
        UpdateSettings({"no.such.setting": "1"}),
        UpdateSettings({"cluster.no_master_block": "never"}),
        UpdateSettings({"cluster.publish.timeout": "1ms"}),
    ]:
        forged = encode_envelope(Envelope("127.0.0.1:1", ForwardedRequest("forger", 1, request)))
        assert http("POST", f"http://{node.transport_address}/_transport/message", raw=forged)[0] == 204
    assert node.put("/_cluster/metadata/after-forgery", 1)[0] == 200  # ordered after the forged requests
    state = node.get("/_cluster/state")[1]
    assert list(state["metadata"]["kv"]) == ["after-forgery"] and state["metadata"]["persistent_settings"] == {}
    assert node.log_path is not None
    log = node.log_path.read_text()
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]
    assert log.count("refused a malformed request") == len(MALFORMED)


# -- timeouts, in process with short limits ------------------------------------------------------------------


async def start_client_port(
    port: int, metrics: NodeMetrics | None = None, access: Callable[..., Any] | None = None
) -> web.AppRunner:
    """The API's middlewares (`access` in front, as with tokens) and runner around a handler that echoes the
    body's length."""
    stand_in = types.SimpleNamespace(
        metrics=metrics or NodeMetrics(lambda: None),
        config=types.SimpleNamespace(get=lambda name: 1024),
    )

    async def echo(request: web.Request) -> web.Response:
        return web.json_response({"length": len(await request.read())})

    app = web.Application(middlewares=[*([access] if access else []), errors.errors_middleware])
    app[app_keys.NODE_KEY] = stand_in  # type: ignore[misc]  # the middleware only needs metrics and config
    app.router.add_put("/echo", echo)
    runner = http_server.ClientAppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


async def closed_by_server(reader: asyncio.StreamReader, within_s: float) -> bytes:
    return await asyncio.wait_for(reader.read(), within_s)


def test_slow_headers_idle_connections_and_slow_bodies_are_cut_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_server, "IDLE_TIMEOUT_S", 0.5)
    monkeypatch.setattr(errors, "BODY_TIMEOUT_S", 0.5)

    async def scenario() -> None:
        port = free_ports(1)[0]
        runner = await start_client_port(port)
        try:
            # A request head that never ends.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"PUT /echo HTTP/1.1\r\nHost: x\r\n")
            assert await closed_by_server(reader, 10) == b""
            writer.close()
            # An idle keep-alive connection after one request.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"PUT /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab")
            answer = await closed_by_server(reader, 10)
            assert b"200 OK" in answer and b'"length": 2' in answer
            writer.close()
            # A body that never arrives in full: 408 in the error shape, and the connection is closed.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"PUT /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab")
            answer = await closed_by_server(reader, 10)
            assert b" 408 " in answer.split(b"\r\n", 1)[0]
            body = json.loads(answer.partition(b"\r\n\r\n")[2])
            assert body["error"]["type"] == "request_timeout_exception" and body["status"] == 408
            writer.close()
            # A normal client is unaffected.
            async with (
                aiohttp.ClientSession() as session,
                session.put(f"http://127.0.0.1:{port}/echo", data=b"abc") as response,
            ):
                assert response.status == 200 and (await response.json()) == {"length": 3}
        finally:
            await runner.cleanup()

    asyncio.run(scenario())


def test_aiohttp_own_404_and_405_get_the_error_shape_the_access_check_and_the_metrics() -> None:
    """No route, or a method the route does not take: aiohttp raises before any handler runs, and the client
    port answers in the error shape, counted, after the access check."""
    metrics = NodeMetrics(lambda: None)

    @web.middleware
    async def refuse_without_token(request: web.Request, handler: Callable[..., Any]) -> web.StreamResponse:
        if request.headers.get("Authorization"):
            return await handler(request)
        metrics.count_request(401)
        body = {"error": {"type": "security_exception", "reason": "no token"}, "status": 401}
        return web.json_response(body, status=401)

    async def scenario() -> None:
        port = free_ports(1)[0]
        runner = await start_client_port(port, metrics, refuse_without_token)
        token = {"Authorization": "Bearer t"}
        try:
            async with aiohttp.ClientSession() as session:
                for method, path, status in (("GET", "/nope", 404), ("GET", "/echo", 405)):
                    async with session.request(method, f"http://127.0.0.1:{port}{path}", headers=token) as response:
                        body = await response.json()
                    assert response.status == status and body["status"] == status, body
                    reason = f"no handler found for uri [{path}] and method [{method}]"
                    assert body["error"]["reason"] == reason, body
                async with session.get(f"http://127.0.0.1:{port}/nope") as response:
                    assert response.status == 401 and (await response.json())["error"]["type"] == "security_exception"
                async with session.put(f"http://127.0.0.1:{port}/echo", data=b"abc", headers=token) as response:
                    assert response.status == 200 and (await response.json()) == {"length": 3}
        finally:
            await runner.cleanup()

    asyncio.run(scenario())
    text = metrics.render().decode()
    for status in (200, 401, 404, 405):
        assert f'coordinated_http_requests_total{{status="{status}"}} 1.0' in text, (status, text)
