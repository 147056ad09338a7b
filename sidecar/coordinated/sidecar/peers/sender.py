"""The transport's sending side: one queue and one sender task per destination, so that messages to a node
arrive in the order the core emitted them.

The task holds a WebSocket to the destination's stream endpoint and writes each message as one frame (see
`framing`). The messages queued for one destination when its task runs (those the core emitted in one
event-loop turn: a publication's batch of replies to forwarded writes, say) go out as one burst: the frames of
the small ones are joined and handed to the socket in one write, so the peer's kernel and event loop wake once
per burst rather than once per frame. A frame has no ack and the stream is ordered, so nothing waits for the
peer in between; aiohttp only suspends a writer when the socket's buffer is full.

Failures: the stream is (re)opened on demand. A message is reported to the core (`on_failure`, which leads
to `handle_send_failure`) only when it certainly was not delivered: no connection could be made after
`retries` retries with backoff, or the stream broke while its burst was being written (a burst reaches the
socket whole or not at all) and the message could not be written on a new stream either. A message written on
a stream that later turns out to be dead is not reported, nor is a timeout: the core's own timers cover both.
A peer that refuses the stream (401, say) gets the message dropped with a warning, as a refused POST was. A
peer of an older version that has no stream endpoint (404/405) is sent POSTs to `/_transport/message` instead,
and the upgrade is tried again after `UPGRADE_RETRY_S`.

TLS: with `transport.ssl.enabled` the sender connects with `https`/`wss`, presenting this node's certificate
from `tls_client`, which is the newest one on disk for each new connection (see `tls`).

The connection watch (`watch_until_closed`) holds a request to a peer's watch endpoint open until the peer
goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import ssl
from collections.abc import Callable, Mapping

import aiohttp
from aiohttp import WSCloseCode, WSMsgType

from coordinated.coordination.messages import Envelope, ForwardedRequest, Message, encode_envelope
from coordinated.coordination.wire_versions import NodeVersion, newest
from coordinated.sidecar.peers.auth import MAX_CLOCK_SKEW_S, NONCE_BYTES, StreamMac, TransportAuth
from coordinated.sidecar.peers.chunked import chunk_frames, transfer_term_version
from coordinated.sidecar.peers.compatibility import version_headers
from coordinated.sidecar.peers.framing import (
    CHUNKED_PROTOCOLS,
    CLOSE_TIMEOUT_S,
    DEFAULT_MAX_CHUNK_SIZE,
    HEARTBEAT_S,
    HMAC_PROTOCOLS,
    MESSAGE_PATH,
    PLAIN_PROTOCOLS,
    STREAM_PATH,
    WATCH_PATH,
    RateLimitedWarnings,
)
from coordinated.sidecar.peers.refusals import REFUSAL_HEADER, Refusals, clock_difference, describe_clock_difference
from coordinated.sidecar.peers.tls import ReloadingContext, TrustRestrictions

log = logging.getLogger("coordinated.transport")

RETRY_BACKOFF_S = (0.02, 0.1, 0.25)
UPGRADE_RETRY_S = 30.0  # how long a peer without the stream endpoint is sent POSTs before trying again
MAX_BURST = 256  # messages taken from a destination's queue at once
JOIN_LIMIT = 256 * 1024  # bytes of frames joined into one socket write at most
ENCODED_CACHE_SIZE = 512  # encoded bodies kept for reuse by the other destinations' tasks


async def _pause_before_retry(attempt: int) -> None:
    """The backoff before retry `attempt + 1` of a connection that certainly failed."""
    await asyncio.sleep(RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)])


class _Stream:
    """One open WebSocket to a peer, with a task reading control frames so that close and ping are seen."""

    def __init__(
        self,
        destination: str,
        ws: aiohttp.ClientWebSocketResponse,
        mac: StreamMac | None,
        chunk_size: int | None = None,
    ) -> None:
        self.destination = destination
        self.ws = ws
        self.mac = mac
        self.chunk_size = chunk_size  # None: the peer takes whole frames only (v1)
        self.reader = asyncio.get_running_loop().create_task(self._read())

    @property
    def closed(self) -> bool:
        return self.ws.closed

    async def send(self, body: bytes) -> None:
        # Raises before writing when the connection is known to be closing; during the write it can only
        # raise after the frame's tail was left in a send buffer that is then dropped (flow control), so a
        # raise means the frame did not reach the peer.
        await self.ws.send_bytes(body if self.mac is None else self.mac.seal(body))

    async def send_joined(self, bodies: list[bytes]) -> None:
        """One frame per body, all handed to the socket in one write. A raise means that none of the frames
        reached the peer."""
        writer = getattr(self.ws, "_writer", None)
        transport = getattr(writer, "transport", None)
        if writer is None or transport is None:
            # An aiohttp whose writer looks different: frame by frame (a raise may then follow whole frames).
            for body in bodies:
                await self.send(body)
            return
        # aiohttp writes each frame with its own transport.write, which uvloop turns into its own send():
        # the writer's transport is swapped for a buffer while it frames the burst, and the buffer goes out
        # in one write. Anything else written meanwhile (a pong, a close frame) joins the buffer in order.
        buffer = _BufferedTransport(transport)
        writer.transport = buffer
        try:
            for body in bodies:
                await self.send(body)
        finally:
            writer.transport = transport
            joined = buffer.joined()
        if transport.is_closing():
            raise ConnectionResetError("the stream closed while a burst was framed")
        if joined:
            transport.write(joined)

    async def send_message(self, body: bytes, message: Message, transfer_id: int) -> None:
        """`body` in one frame, or in chunk frames when it is over the chunk size. A raise part-way leaves an
        unfinished transfer, which the receiver drops whole when the stream ends."""
        if self.chunk_size is None or len(body) <= self.chunk_size:
            await self.send(body)
            return
        term, version = transfer_term_version(message)
        for frame in chunk_frames(body, transfer_id, self.chunk_size, term, version):
            await self.send(frame)

    async def _read(self) -> None:
        # The server sends nothing but the nonce (already read) and control frames; receive() answers pings
        # and notices a close frame, EOF or a missed pong (heartbeat), after which `closed` is true.
        try:
            while True:
                msg = await self.ws.receive()
                if msg.type is WSMsgType.CLOSE:
                    if msg.data not in (WSCloseCode.OK, WSCloseCode.GOING_AWAY):
                        log.warning("peer %s closed the stream: %s %s", self.destination, msg.data, msg.extra)
                    return
                if msg.type in (WSMsgType.CLOSING, WSMsgType.CLOSED):
                    return
                if msg.type is WSMsgType.ERROR:
                    log.debug("stream to %s failed: %r", self.destination, msg.data)
                    return
        except Exception as error:  # never leave a reader failing silently in the background
            log.debug("stream to %s: reader stopped: %r", self.destination, error)

    async def close(self) -> None:
        await _close_quietly(self.ws)
        self.reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.reader


class _BufferedTransport:
    """What aiohttp's frame writer needs of a transport, collecting the writes instead of sending them."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.chunks: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.chunks.append(bytes(data))

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def get_extra_info(self, name: str, default: object = None) -> object:
        return self.transport.get_extra_info(name, default)

    def joined(self) -> bytes:
        chunks, self.chunks = self.chunks, []
        return b"".join(chunks)


class _BurstBroken(Exception):
    """The stream broke during a burst, after `written` of its messages had been written whole."""

    def __init__(self, written: int, cause: Exception) -> None:
        super().__init__(written, cause)
        self.written = written
        self.cause = cause


class _Outcome:
    """Why no stream could be opened."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


UNREACHABLE = _Outcome("unreachable")  # certainly not delivered: report the message to the core
REFUSED = _Outcome("refused")  # the peer answered but will not take it (401, ...): drop with a warning
LOST = _Outcome("lost")  # a timeout or other error: not reported, the core's timers cover it
OLD_PEER = _Outcome("old_peer")  # no stream endpoint: use POST


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
        tls_client: ReloadingContext | None = None,
        peer_name: Callable[[str], str] = str,
        max_chunk_size: int = DEFAULT_MAX_CHUNK_SIZE,
        refusals: Refusals | None = None,
        trust: TrustRestrictions | None = None,
        version: NodeVersion | None = None,
    ) -> None:
        self.local_address = local_address
        self.version = version if version is not None else newest()  # sent on each stream's handshake
        self.trust = trust  # which certificates are nodes': messages go to no other peer
        self.refusals = refusals or Refusals()  # peers that refused this node, for health
        self.max_chunk_size = max_chunk_size
        self._transfer_ids = itertools.count(1)
        # Maps a destination address to the stable name its bytes are counted under (a node name: pod IPs
        # change with every restart, and a metric label holding them would start new series each time).
        self.peer_name = peer_name
        self.tls_client = tls_client
        self.scheme = "https" if tls_client is not None else "http"
        self.on_failure = on_failure
        self.auth = auth
        self.retries = retries
        self.queue_size = queue_size
        self.request_timeout_s = request_timeout_s
        self.timeout = aiohttp.ClientTimeout(total=request_timeout_s, connect=connect_timeout_s)
        self.queues: dict[str, asyncio.Queue[Message]] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.streams: dict[str, _Stream] = {}
        self.session: aiohttp.ClientSession | None = None
        self.bytes_sent: dict[str, int] = {}  # by peer name, counted when sent: never decreases
        self.dropped = 0
        # Destinations without a stream endpoint (an older version) -> loop time until which POSTs are used.
        self._post_until: dict[str, float] = {}
        self._warnings = RateLimitedWarnings()
        # id(message) -> (message, its encoded envelope); the message is kept so that its id stays its own.
        self._encoded: dict[int, tuple[Message, bytes]] = {}
        self._protocols = (*HMAC_PROTOCOLS, *PLAIN_PROTOCOLS) if auth is not None else PLAIN_PROTOCOLS

    def ssl_context(self) -> ssl.SSLContext | bool:
        """For a new connection: this node's newest client context, or True (aiohttp's default) without TLS."""
        return self.tls_client.current() if self.tls_client is not None else True

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
        while True:
            # Wakes up in the loop turn after the first put; whatever else was queued for this destination by
            # then (the rest of the core's effects of that turn) goes out in the same burst.
            burst = [await queue.get()]
            while len(burst) < MAX_BURST and not queue.empty():
                burst.append(queue.get_nowait())
            try:
                await self._deliver(destination, burst)
            except Exception:
                log.exception("failed to send %d message(s) to %s", len(burst), destination)
            finally:
                for _ in burst:
                    queue.task_done()

    def _encode(self, message: Message) -> bytes:
        # The core sends one message object to several peers (a publication's diff, its commit): the drain
        # tasks run one after the other, so the bodies encoded for the first are reused for the others.
        # The cache lives for one event-loop turn, so that a large body (a full state) is not held any longer.
        cached = self._encoded.get(id(message))
        if cached is not None and cached[0] is message:
            return cached[1]
        body = encode_envelope(Envelope(self.local_address, message))
        if not self._encoded:
            with contextlib.suppress(RuntimeError):  # no running loop (a direct call): the next call clears it
                asyncio.get_running_loop().call_soon(self._encoded.clear)
        elif len(self._encoded) >= ENCODED_CACHE_SIZE:
            self._encoded.clear()
        self._encoded[id(message)] = (message, body)
        return body

    async def _write_burst(self, stream: _Stream, messages: list[Message], bodies: list[bytes]) -> None:
        """Writes the burst in order: runs of small messages joined into one socket write each, a large one (over
        JOIN_LIMIT, or chunked) on its own. Raises _BurstBroken with how many messages were written whole
        before the stream broke; the one being written and those after it did not reach the peer."""
        written = 0
        run: list[bytes] = []

        async def write_run() -> None:
            nonlocal written, run
            try:
                await (stream.send(run[0]) if len(run) == 1 else stream.send_joined(run))
            except (ConnectionError, aiohttp.ClientError) as error:
                raise _BurstBroken(written, error) from error
            written += len(run)
            run = []

        size = 0
        for message, body in zip(messages, bodies, strict=True):
            large = len(body) > JOIN_LIMIT or (stream.chunk_size is not None and len(body) > stream.chunk_size)
            if run and (large or size + len(body) > JOIN_LIMIT):
                await write_run()
                size = 0
            if not large:
                run.append(body)
                size += len(body)
                continue
            try:
                await stream.send_message(body, message, next(self._transfer_ids))
            except (ConnectionError, aiohttp.ClientError) as error:
                raise _BurstBroken(written, error) from error
            written += 1
        if run:
            await write_run()

    async def _deliver(self, destination: str, messages: list[Message]) -> None:
        bodies = [self._encode(message) for message in messages]
        peer = self.peer_name(destination)
        self.bytes_sent[peer] = self.bytes_sent.get(peer, 0) + sum(len(body) for body in bodies)
        post_until = self._post_until.get(destination)
        if post_until is not None:
            if asyncio.get_running_loop().time() < post_until:
                for message in messages:
                    await self._post_or_report(destination, message)
                return
            del self._post_until[destination]
        for attempt in range(2):
            stream = self.streams.get(destination)
            if stream is None or stream.closed:
                if stream is not None:
                    del self.streams[destination]
                    await stream.close()
                opened = await self._open(destination)
                if opened is UNREACHABLE:
                    for message in messages:
                        self.on_failure(destination, message)
                    return
                if opened is OLD_PEER:
                    for message in messages:
                        await self._post_or_report(destination, message)
                    return
                if not isinstance(opened, _Stream):
                    return  # REFUSED or LOST: logged; not reported, as before
                stream = self.streams[destination] = opened
            try:
                await self._write_burst(stream, messages, bodies)
                return
            except _BurstBroken as broken:
                log.debug(
                    "stream to %s broke while sending %d message(s): %r", destination, len(messages), broken.cause
                )
                if self.streams.get(destination) is stream:
                    del self.streams[destination]
                await stream.close()
                # The messages written whole before the break are delivered as far as we can know; the others
                # did not reach the peer (see _Stream.send). They are sent again once on a new stream; but not
                # a forwarded client request: if it had arrived after all, a second copy would execute the
                # write twice. The core answers its failure with "maybe applied".
                messages, bodies = messages[broken.written :], bodies[broken.written :]
                failed = messages if attempt == 1 else [m for m in messages if isinstance(m, ForwardedRequest)]
                for message in failed:
                    self.on_failure(destination, message)
                if attempt == 1:
                    return
                # The bodies go with their messages: the encoding cache is gone by now (it lasts one loop turn).
                resent = [
                    (m, body) for m, body in zip(messages, bodies, strict=True) if not isinstance(m, ForwardedRequest)
                ]
                if not resent:
                    return
                messages, bodies = [m for m, _ in resent], [body for _, body in resent]

    async def _open(self, destination: str) -> _Stream | _Outcome:
        assert self.session is not None
        url = f"{self.scheme}://{destination}{STREAM_PATH}"
        for attempt in range(self.retries + 1):
            headers = self.auth.sign_stream_handshake() if self.auth is not None else {}
            headers |= version_headers(self.version)
            try:
                ws = await self.session.ws_connect(
                    url,
                    protocols=self._protocols,
                    headers=headers,
                    heartbeat=HEARTBEAT_S,
                    timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=CLOSE_TIMEOUT_S),
                    max_msg_size=64 * 1024,  # the peer sends a nonce and control frames only
                    ssl=self.ssl_context(),
                )
            except aiohttp.WSServerHandshakeError as error:
                if error.status in (404, 405) and self.trust is None:
                    log.info(
                        "%s has no stream endpoint (an older version?): sending POSTs for %.0fs",
                        destination,
                        UPGRADE_RETRY_S,
                    )
                    self._post_until[destination] = asyncio.get_running_loop().time() + UPGRADE_RETRY_S
                    return OLD_PEER
                reason = refusal_reason(error.status, error.message, error.headers)
                self.refusals.refused(destination, reason, by_peer=True)
                self._warnings.warn(f"refused {destination}", "peer %s refused the stream: %s", url, reason)
                return REFUSED
            except aiohttp.ClientSSLError as error:
                # A peer whose certificate is not of this cluster's CA (or that refused ours): never a member.
                self.refusals.refused(destination, f"TLS handshake failed: {error}", by_peer=True)
                self._warnings.warn(f"tls {destination}", "TLS handshake with %s failed: %s", url, error)
                return REFUSED
            except (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError) as error:
                if attempt < self.retries:
                    await _pause_before_retry(attempt)
                    continue
                if self.tls_client is not None and not isinstance(
                    getattr(error, "os_error", None), ConnectionRefusedError
                ):
                    # The peer listens but dropped the connection in or right after the TLS handshake (with
                    # uvloop a refused client certificate shows this way rather than as a reset stream).
                    self.refusals.refused(destination, CERTIFICATE_REFUSED, by_peer=True)
                    self._warnings.warn(
                        f"reset {destination}",
                        "peer %s closed the connection during the TLS handshake (%s): does this node's "
                        "certificate (transport.ssl.certificate) come from the cluster's CA?",
                        url,
                        error,
                    )
                log.debug("cannot connect to %s: %s", url, error)
                return UNREACHABLE
            except (TimeoutError, aiohttp.ClientError, OSError) as error:
                # E.g. a hung peer: not reported, the core's checks decide about it.
                if self.tls_client is not None and isinstance(error, aiohttp.ClientOSError):
                    # With TLS 1.3 a peer checks our certificate after our side of the handshake is done; a
                    # refusal then shows here only as a reset connection, so say what it likely means.
                    self.refusals.refused(destination, CERTIFICATE_REFUSED, by_peer=True)
                    self._warnings.warn(
                        f"reset {destination}",
                        "peer %s closed the connection as the stream was opened (%s): does this node's "
                        "certificate (transport.ssl.certificate) come from the cluster's CA?",
                        url,
                        error,
                    )
                log.debug("cannot open a stream to %s: %r", url, error)
                return LOST
            return await self._handshake(destination, ws)
        return UNREACHABLE

    async def _handshake(self, destination: str, ws: aiohttp.ClientWebSocketResponse) -> _Stream | _Outcome:
        if self.trust is not None:
            ssl_object = ws.get_extra_info("ssl_object")
            problem = self.trust.problem(ssl_object.getpeercert() if ssl_object is not None else None)
            if problem is not None:
                self.refusals.refused(destination, f"this node refuses to send to it: {problem}", by_peer=True)
                self._warnings.warn(f"trust {destination}", "not sending to %s: %s", destination, problem)
                await _close_quietly(ws)
                return REFUSED
        mac: StreamMac | None = None
        if ws.protocol in HMAC_PROTOCOLS and self.auth is not None:
            try:
                msg = await ws.receive(timeout=self.request_timeout_s)
            except (TimeoutError, aiohttp.ClientError, OSError) as error:
                log.debug("no nonce from %s: %r", destination, error)
                await _close_quietly(ws)
                return LOST
            if msg.type is not WSMsgType.BINARY or len(msg.data) != NONCE_BYTES:
                log.debug("no nonce from %s: %s", destination, msg.type)
                await _close_quietly(ws)
                return LOST
            mac = self.auth.stream_mac(msg.data)
        elif ws.protocol not in PLAIN_PROTOCOLS:
            self._warnings.warn(
                f"protocol {destination}", "peer %s accepted the stream without a known protocol", destination
            )
            await _close_quietly(ws)
            return REFUSED
        chunk_size = self.max_chunk_size if ws.protocol in CHUNKED_PROTOCOLS else None
        self.refusals.accepted(destination)
        return _Stream(destination, ws, mac, chunk_size)

    async def _post_or_report(self, destination: str, message: Message) -> None:
        # A unique POST: the receiver refuses a replay of it (see auth), retries of this one included.
        nonce = os.urandom(NONCE_BYTES).hex()
        body = encode_envelope(Envelope(self.local_address, message, request_nonce=nonce, receiver=destination))
        if not await self._post(destination, body):
            self.on_failure(destination, message)

    async def _post(self, destination: str, body: bytes) -> bool:
        """The transport of older versions, for peers without the stream endpoint."""
        assert self.session is not None
        url = f"{self.scheme}://{destination}{MESSAGE_PATH}"
        for attempt in range(self.retries + 1):
            headers = {"Content-Type": "application/json"}
            if self.auth is not None:
                headers.update(self.auth.sign(body))
            try:
                async with self.session.post(url, data=body, headers=headers, ssl=self.ssl_context()) as response:
                    if response.status >= 400:
                        reason = refusal_reason(response.status, (await response.text())[:200], response.headers)
                        self.refusals.refused(destination, reason, by_peer=True)
                        log.warning("peer %s refused a message: %s", url, reason)
                    return True  # delivered (or refused for good): either way not a connection failure
            except aiohttp.ClientSSLError as error:
                self._warnings.warn(f"tls {url}", "TLS handshake with %s failed: %s", url, error)
                return True  # refused for good, as a 401 is: not a connection failure
            except (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError) as error:
                if attempt < self.retries:
                    await _pause_before_retry(attempt)
                    continue
                log.debug("cannot deliver to %s: %s", url, error)
                return False
            except (TimeoutError, aiohttp.ClientError) as error:
                # Maybe delivered; the core's timers notice if it was not.
                log.debug("no ack from %s: %r", url, error)
                return True
        return False

    async def close(self) -> None:
        """Stop sending and close the streams gracefully: a peer that answers the close frame has read every
        frame written before it."""
        for task in self.tasks.values():
            task.cancel()
        for task in self.tasks.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        streams = list(self.streams.values())
        self.streams.clear()
        await asyncio.gather(*(stream.close() for stream in streams), return_exceptions=True)
        if self.session is not None:
            await self.session.close()

    async def flush(self, timeout_s: float) -> None:
        """Wait (bounded) until every queue is empty and the message being sent has been written (or has
        failed), e.g. so that a handover message leaves before we exit; `close` then confirms it arrived."""
        waits = [queue.join() for queue in self.queues.values()]
        if not waits:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*waits), timeout_s)


async def _close_quietly(ws: aiohttp.ClientWebSocketResponse) -> None:
    with contextlib.suppress(TimeoutError, aiohttp.ClientError, OSError):
        await asyncio.wait_for(ws.close(), CLOSE_TIMEOUT_S * 2)


CERTIFICATE_REFUSED = (
    "closed the connection during the TLS handshake: does this node's certificate (transport.ssl.certificate) "
    "come from the cluster's CA?"
)


def refusal_reason(status: int, message: str, headers: Mapping[str, str] | None) -> str:
    """What a peer's refusal says, from its status and headers; with how far this node's clock is from the
    peer's when that is beyond what transport authentication allows (the likely cause of a 401 then)."""
    headers = headers or {}
    reason = f"{status} {headers.get(REFUSAL_HEADER) or message}"
    difference = clock_difference(headers.get("Date"))
    if status == 401 and difference is not None and abs(difference) > MAX_CLOCK_SKEW_S:
        reason += f" ({describe_clock_difference(difference)}; transport authentication allows {MAX_CLOCK_SKEW_S}s)"
    return reason


async def watch_until_closed(
    session: aiohttp.ClientSession,
    address: str,
    auth: TransportAuth | None,
    tls_client: ReloadingContext | None = None,
    trust: TrustRestrictions | None = None,
) -> str:
    """Return (with the reason) when the peer's watch connection ends or cannot be opened."""
    headers = auth.sign(b"") if auth is not None else {}
    timeout = aiohttp.ClientTimeout(total=None, connect=2, sock_read=None)
    scheme, context = ("https", tls_client.current()) if tls_client is not None else ("http", True)
    url = f"{scheme}://{address}{WATCH_PATH}"
    try:
        async with session.get(url, headers=headers, timeout=timeout, ssl=context) as response:
            if response.status != 200:
                return f"watch refused with {response.status}"
            if trust is not None and response.connection is not None and response.connection.transport is not None:
                ssl_object = response.connection.transport.get_extra_info("ssl_object")
                problem = trust.problem(ssl_object.getpeercert() if ssl_object is not None else None)
                if problem is not None:
                    return f"not a node: {problem}"
            while await response.content.readany():
                pass
            return "connection closed"
    except (aiohttp.ClientError, OSError) as error:
        return f"{type(error).__name__}: {error}"
