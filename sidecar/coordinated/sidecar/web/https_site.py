"""The client port's TLS listener, which answers a plain-HTTP request with a 400 that says to use https.

A TLS server that gets plain HTTP fails the handshake and closes the connection, so `curl http://...` on an
HTTPS port prints only "Empty reply from server". Here each accepted connection's first byte is peeked at
(without reading it) before TLS starts: a TLS record (a handshake, 0x16) goes to aiohttp over TLS as with
`web.TCPSite`; anything else gets one plain-text HTTP answer naming the fix, and is closed. Only public
asyncio calls are used (`sock_accept`, `add_reader`, `connect_accepted_socket`), so uvloop serves it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import ssl
from typing import Any

from aiohttp import web

from coordinated.sidecar.web.http_server import IDLE_TIMEOUT_S, error_body

log = logging.getLogger("coordinated.api")

TLS_HANDSHAKE_RECORD = 0x16  # the first byte of every TLS ClientHello
HANDSHAKE_TIMEOUT_S = 30.0


def plain_http_answer(port: int) -> bytes:
    reason = f"this port speaks HTTPS only: send the request to https://<host>:{port}/ (it came as plain HTTP)"
    body = json.dumps(error_body("bad_request_exception", reason, 400)).encode()
    head = (
        "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class _Listener:
    """What BaseSite.stop() closes: the accept loop and its socket."""

    def __init__(self, sock: socket.socket, task: asyncio.Task[None]) -> None:
        self.sock, self.task = sock, task

    def close(self) -> None:
        self.task.cancel()
        self.sock.close()


class HttpsSite(web.TCPSite):
    """`web.TCPSite` with an `ssl_context`, plus the plain-HTTP answer above."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *, ssl_context: ssl.SSLContext) -> None:
        super().__init__(runner, host, port, ssl_context=ssl_context, reuse_address=True)
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner; the listener is ours
        sock = socket.create_server((self._host or "", self._port), backlog=self._backlog)
        sock.setblocking(False)
        self._bound_port = sock.getsockname()[1]
        self._server = _Listener(sock, asyncio.create_task(self._accept(sock)))  # type: ignore[assignment]

    async def stop(self) -> None:
        await super().stop()
        for task in list(self._connections):
            task.cancel()

    async def _accept(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                connection, _ = await loop.sock_accept(listener)
            except OSError as error:  # out of descriptors, say: the next accept may work
                log.warning("accepting a client connection failed: %s", error)
                await asyncio.sleep(0.1)
                continue
            task = asyncio.create_task(self._serve(connection))
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)

    async def _serve(self, connection: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        handed_over = False
        try:
            first = await _peek(loop, connection, IDLE_TIMEOUT_S)
            if first is None:
                return  # closed, or silent for too long
            if first[0] == TLS_HANDSHAKE_RECORD:
                server: Any = self._runner.server
                await loop.connect_accepted_socket(
                    server, connection, ssl=self._ssl_context, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S
                )
                handed_over = True
                return
            peer = connection.getpeername()
            await loop.sock_recv(connection, 65536)  # the request head: closing over unread bytes sends a reset
            await loop.sock_sendall(connection, plain_http_answer(self.port))
            log.info("answered a plain-HTTP request from %s on the HTTPS client port with 400", peer)
        except (OSError, ssl.SSLError, TimeoutError) as error:
            log.debug("a client connection ended before it was served: %s", error)
        finally:
            if not handed_over:
                with contextlib.suppress(OSError):
                    connection.close()


async def _peek(loop: asyncio.AbstractEventLoop, connection: socket.socket, timeout: float) -> bytes | None:
    """The connection's first byte, left unread; None when it closes or sends nothing within `timeout`."""
    readable: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(connection.fileno(), ready)
    try:
        await asyncio.wait_for(readable, timeout)
    except TimeoutError:
        return None
    finally:
        loop.remove_reader(connection.fileno())
    first = connection.recv(1, socket.MSG_PEEK)
    return first or None
