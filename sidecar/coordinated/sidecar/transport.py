"""The peer transport: one-way messages as HTTP POSTs of encoded envelopes on the transport port.

Sending: one queue and one sender task per destination, so that messages to a node arrive in the order the
core emitted them, over a pooled keep-alive connection. Only failures that prove the message was not
delivered (cannot connect, or a pooled connection found closed) are retried, a bounded number of times;
then the core hears `handle_send_failure`. A timeout is not reported: the core's own timers cover it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import aiohttp
import msgspec
from aiohttp import web

from coordinated.coordination.messages import Envelope, Message, decode_envelope, encode_envelope
from coordinated.sidecar.auth import TransportAuth

log = logging.getLogger("coordinated.transport")

MESSAGE_PATH = "/_transport/message"
WATCH_PATH = "/_transport/watch"
RETRY_BACKOFF_S = (0.02, 0.1, 0.25)


class PeerSender:
    def __init__(
        self,
        local_address: str,
        on_failure: Callable[[str, Message], None],
        auth: TransportAuth | None,
        request_timeout_s: float,
        connect_timeout_s: float,
        retries: int,
        queue_size: int,
    ) -> None:
        self.local_address = local_address
        self.on_failure = on_failure
        self.auth = auth
        self.retries = retries
        self.queue_size = queue_size
        self.timeout = aiohttp.ClientTimeout(total=request_timeout_s, connect=connect_timeout_s)
        self.queues: dict[str, asyncio.Queue[Message]] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.session: aiohttp.ClientSession | None = None
        self.bytes_sent: dict[str, int] = {}
        self.dropped = 0

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60, enable_cleanup_closed=True)
        self.session = aiohttp.ClientSession(connector=connector, timeout=self.timeout)

    def send(self, destination: str, message: Message) -> None:
        queue = self.queues.get(destination)
        if queue is None:
            queue = self.queues[destination] = asyncio.Queue(self.queue_size)
            self.tasks[destination] = asyncio.create_task(self._drain(destination, queue))
        try:
            queue.put_nowait(message)
        except asyncio.QueueFull:
            # The destination is far behind (likely stopped); the protocol tolerates lost messages.
            self.dropped += 1
            log.warning("dropping a %s to %s: its send queue is full", type(message).__name__, destination)

    async def _drain(self, destination: str, queue: asyncio.Queue[Message]) -> None:
        url = f"http://{destination}{MESSAGE_PATH}"
        while True:
            message = await queue.get()
            body = encode_envelope(Envelope(self.local_address, message))
            self.bytes_sent[destination] = self.bytes_sent.get(destination, 0) + len(body)
            delivered = await self._post(url, body)
            if not delivered:
                self.on_failure(destination, message)

    async def _post(self, url: str, body: bytes) -> bool:
        assert self.session is not None
        for attempt in range(self.retries + 1):
            headers = {"Content-Type": "application/json"}
            if self.auth is not None:
                headers.update(self.auth.sign(body))
            try:
                async with self.session.post(url, data=body, headers=headers) as response:
                    if response.status >= 400:
                        text = (await response.text())[:200]
                        log.warning("peer %s refused a message: %s %s", url, response.status, text)
                    return True  # delivered (or refused for good): either way not a connection failure
            except (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError) as error:
                if attempt < self.retries:
                    await asyncio.sleep(RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)])
                    continue
                log.debug("cannot deliver to %s: %s", url, error)
                return False
            except (TimeoutError, aiohttp.ClientError) as error:
                # Maybe delivered; the core's timers notice if it was not.
                log.debug("no ack from %s: %r", url, error)
                return True
        return False

    async def close(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        for task in self.tasks.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.session is not None:
            await self.session.close()

    async def flush(self, timeout_s: float) -> None:
        """Wait (bounded) until every queue is empty, e.g. so a handover message leaves before we exit."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while any(not queue.empty() for queue in self.queues.values()):
            if asyncio.get_running_loop().time() > deadline:
                return
            await asyncio.sleep(0.01)


def transport_app(
    on_message: Callable[[str, Message], None], auth: TransportAuth | None, max_body: int
) -> web.Application:
    async def receive(request: web.Request) -> web.Response:
        body = await request.read()
        if auth is not None:
            problem = auth.verify(request.headers, body)
            if problem is not None:
                return web.json_response(
                    {"error": {"type": "security_exception", "reason": problem}, "status": 401}, status=401
                )
        try:
            envelope = decode_envelope(body)
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            return web.json_response(
                {"error": {"type": "parse_exception", "reason": str(error)}, "status": 400}, status=400
            )
        on_message(envelope.sender, envelope.message)
        return web.Response(status=204)

    closing = asyncio.Event()

    async def watch(request: web.Request) -> web.StreamResponse:
        # Held open until this process stops: a follower watching its master sees the connection close at
        # once when the master dies (kill -9 included), instead of waiting for the next leader check.
        if auth is not None and auth.verify(request.headers, b"") is not None:
            return web.Response(status=401)
        response = web.StreamResponse(status=200)
        await response.prepare(request)
        await closing.wait()
        return response

    async def on_shutdown(app: web.Application) -> None:
        closing.set()

    app = web.Application(client_max_size=max_body)
    app.router.add_post(MESSAGE_PATH, receive)
    app.router.add_get(WATCH_PATH, watch)
    app.on_shutdown.append(on_shutdown)
    return app


async def watch_until_closed(session: aiohttp.ClientSession, address: str, auth: TransportAuth | None) -> str:
    """Return (with the reason) when the peer's watch connection ends or cannot be opened."""
    headers = auth.sign(b"") if auth is not None else {}
    timeout = aiohttp.ClientTimeout(total=None, connect=2, sock_read=None)
    try:
        async with session.get(f"http://{address}{WATCH_PATH}", headers=headers, timeout=timeout) as response:
            if response.status != 200:
                return f"watch refused with {response.status}"
            while await response.content.readany():
                pass
            return "connection closed"
    except (aiohttp.ClientError, OSError) as error:
        return f"{type(error).__name__}: {error}"
