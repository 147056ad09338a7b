"""A fault-injecting HTTP proxy in front of the real S3 server: it forwards every request unchanged (the Host
header too, which SigV4 signs), or answers 500 InternalError, or holds each request for a while first.

Used where stopping the server or pointing at a wrong port cannot show the fault: a store that answers with
server errors, and one that is slow. It runs on an event loop of its own in a daemon thread, on loopback.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Literal

import aiohttp
from aiohttp import web

from coordinated.tools.s3server import free_port

Mode = Literal["pass", "error", "slow"]
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "content-length"}
_INTERNAL_ERROR = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
    b"<Message>We encountered an internal error. Please try again.</Message></Error>"
)


class FaultProxy:
    def __init__(self, upstream: str, *, delay_s: float = 5.0) -> None:
        self.upstream = upstream.rstrip("/")
        self.port = free_port()
        self.mode: Mode = "pass"
        self.delay_s = delay_s
        self.requests = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="s3-fault-proxy", daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        body = await request.read()
        if self.mode == "error":
            return web.Response(status=500, body=_INTERNAL_ERROR, content_type="application/xml")
        if self.mode == "slow":
            await asyncio.sleep(self.delay_s)
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        async with self._session.request(
            request.method, self.upstream + request.rel_url.raw_path_qs, headers=headers, data=body,
            allow_redirects=False, auto_decompress=False,
        ) as upstream:  # fmt: skip
            payload = await upstream.read()
            reply = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP}
            return web.Response(status=upstream.status, body=payload, headers=reply)

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession(skip_auto_headers=("User-Agent", "Content-Type"))
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def start(self) -> FaultProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
