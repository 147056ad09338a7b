"""The peer transport: one-way messages over one persistent WebSocket stream per destination.

Sending: one queue and one sender task per destination, so that messages to a node arrive in the order the
core emitted them. The task holds a WebSocket to the destination's `GET /_transport/stream` and writes each
message as one binary frame holding one encoded envelope, with a MAC in front when a cluster secret is
configured (see `auth`); a message larger than `transport.max_chunk_size` goes as chunk frames (see "Large
messages" below). The messages queued for one destination when its task runs (those the core emitted in one
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

Large messages: on a stream of protocol v2 a message whose envelope is larger than `transport.max_chunk_size`
goes as chunk frames that the receiver reassembles and verifies before passing it on (see `chunked`); the
receiver refuses any frame larger than its own `max_chunk_size` (plus the chunk header and MAC). A peer that
only speaks v1 (an older version) is sent whole frames, as before.

Receiving: the transport app serves the stream, the POST route (older senders during a rolling upgrade)
and the connection watch (`watch_until_closed`).

Versions: the stream's handshake carries the sender's release and wire version (`X-Coordinated-Release`,
`X-Coordinated-Wire-Version`; release 0.1.0 sends neither, and is taken for wire version 1). A sender below
this node's `MINIMUM_COMPATIBLE` is refused at the handshake (400), naming both versions, and both nodes show
the refusal in their health. A frame this node cannot decode (a newer node's message type, or a request type
or field it does not know) never closes the stream that carries it: the node is told (`on_undecodable`, which
answers a forwarded request with a refusal its sender understands) and reads the next frame; it logs once per
peer and kind, not per frame.

TLS: with `transport.ssl.enabled` the listener is served with the mutual-TLS context of `tls` (in `cli`) and
the sender connects with `https`/`wss`, presenting this node's certificate from `tls_client`, which is the
newest one on disk for each new connection (see `tls`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import NamedTuple

import aiohttp
import msgspec
from aiohttp import WSCloseCode, WSMsgType, web

from coordinated.coordination.client import error_body
from coordinated.coordination.messages import (
    Envelope,
    ForwardedRequest,
    Message,
    decode_envelope,
    encode_envelope,
)
from coordinated.coordination.wire_versions import MINIMUM_COMPATIBLE, UNVERSIONED, NodeVersion, newest
from coordinated.sidecar.peers.auth import (
    MAC_BYTES,
    MAX_CLOCK_SKEW_S,
    NONCE_BYTES,
    ReplayCache,
    StreamMac,
    TransportAuth,
    signed_at_or_problem,
)
from coordinated.sidecar.peers.chunked import (
    HEADER_BYTES,
    Complete,
    Discarded,
    Reassembler,
    chunk_frames,
    header_mismatch,
    is_chunk,
    transfer_term_version,
)
from coordinated.sidecar.peers.refusals import REFUSAL_HEADER, Refusals, clock_difference, describe_clock_difference
from coordinated.sidecar.peers.tls import ReloadingContext, TrustRestrictions

log = logging.getLogger("coordinated.transport")

RELEASE_HEADER = "X-Coordinated-Release"
WIRE_VERSION_HEADER = "X-Coordinated-Wire-Version"
MESSAGE_PATH = "/_transport/message"
STREAM_PATH = "/_transport/stream"
WATCH_PATH = "/_transport/watch"
# WebSocket subprotocols: plain envelopes, or MAC || envelope (see auth). The server picks one. v2 adds chunk
# frames (see `chunked`); a v1 peer (an older version) gets every message as one frame.
PROTOCOL_PLAIN = "coordinated.v1"
PROTOCOL_HMAC = "coordinated.v1.hmac-sha256"
PROTOCOL_PLAIN_V2 = "coordinated.v2"
PROTOCOL_HMAC_V2 = "coordinated.v2.hmac-sha256"
_HMAC_PROTOCOLS = (PROTOCOL_HMAC_V2, PROTOCOL_HMAC)
_PLAIN_PROTOCOLS = (PROTOCOL_PLAIN_V2, PROTOCOL_PLAIN)
_CHUNKED_PROTOCOLS = (PROTOCOL_HMAC_V2, PROTOCOL_PLAIN_V2)
DEFAULT_MAX_CHUNK_SIZE = 1024 * 1024  # transport.max_chunk_size
RETRY_BACKOFF_S = (0.02, 0.1, 0.25)
HEARTBEAT_S = 10.0  # a ping after this long without traffic; no pong within half of it closes the stream
UPGRADE_RETRY_S = 30.0  # how long a peer without the stream endpoint is sent POSTs before trying again
CLOSE_TIMEOUT_S = 1.0  # how long a graceful close waits for the peer's close frame
WARNING_INTERVAL_S = 10.0
MAX_BURST = 256  # messages taken from a destination's queue at once
JOIN_LIMIT = 256 * 1024  # bytes of frames joined into one socket write at most
ENCODED_CACHE_SIZE = 512  # encoded bodies kept for reuse by the other destinations' tasks


async def _pause_before_retry(attempt: int) -> None:
    """The backoff before retry `attempt + 1` of a connection that certainly failed."""
    await asyncio.sleep(RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)])


class _RateLimitedWarnings:
    """At most one warning per key and interval; the others are logged at debug level."""

    def __init__(self, interval_s: float = WARNING_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._last: dict[str, float] = {}

    def warn(self, key: str, message: str, *args: object) -> None:
        now = time.monotonic()
        last = self._last.get(key)
        if last is None or now - last >= self.interval_s:
            self._last[key] = now
            log.warning(message, *args)
        else:
            log.debug(message, *args)


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
        self._warnings = _RateLimitedWarnings()
        # id(message) -> (message, its encoded envelope); the message is kept so that its id stays its own.
        self._encoded: dict[int, tuple[Message, bytes]] = {}
        self._protocols = (*_HMAC_PROTOCOLS, *_PLAIN_PROTOCOLS) if auth is not None else _PLAIN_PROTOCOLS

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
        if ws.protocol in _HMAC_PROTOCOLS and self.auth is not None:
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
        elif ws.protocol not in _PLAIN_PROTOCOLS:
            self._warnings.warn(
                f"protocol {destination}", "peer %s accepted the stream without a known protocol", destination
            )
            await _close_quietly(ws)
            return REFUSED
        chunk_size = self.max_chunk_size if ws.protocol in _CHUNKED_PROTOCOLS else None
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


def _offered_protocols(request: web.Request) -> list[str]:
    header = request.headers.get(aiohttp.hdrs.SEC_WEBSOCKET_PROTOCOL, "")
    return [protocol.strip() for protocol in header.split(",") if protocol.strip()]


def _error(status: int, error_type: str, reason: str) -> web.Response:
    return web.json_response(error_body(error_type, reason, status), status=status)


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


def replay_problem(envelope: Envelope, signed_at: int, started_at: int, receivers: set[str]) -> str | None:
    """Why a signed POST may be a replay from before this node started, or of one sent to another node."""
    if envelope.receiver not in receivers:
        return (
            f"the request is addressed to [{envelope.receiver or 'no receiver'}], not to this node {sorted(receivers)}: "
            "a signed POST must name the node it is sent to"
        )
    if signed_at <= started_at:
        return "the request was signed before this node started: a replay from an earlier run is refused"
    return None


def _receivers(request: web.Request, local_address: str) -> set[str]:
    """The addresses a POST to this node may name: its published one, and the one the connection reached."""
    receivers = {local_address} if local_address else set()
    sockname = request.transport.get_extra_info("sockname") if request.transport is not None else None
    if isinstance(sockname, tuple) and len(sockname) >= 2:
        host = str(sockname[0])
        receivers.add(f"[{host}]:{sockname[1]}" if ":" in host else f"{host}:{sockname[1]}")
    return receivers


def _refused(
    refusals: Refusals, request: web.Request, problem: str, status: int = 401, error_type: str = "security_exception"
) -> web.Response:
    """A transport request refused (for authentication, or the peer's version): recorded for health, the reason
    in a header as well."""
    refusals.refused(request.remote or "?", problem, by_peer=False)
    response = _error(status, error_type, problem)
    response.headers[REFUSAL_HEADER] = problem
    return response


def version_headers(version: NodeVersion) -> dict[str, str]:
    return {RELEASE_HEADER: version.release, WIRE_VERSION_HEADER: str(version.wire)}


def peer_version(headers: Mapping[str, str]) -> NodeVersion | str:
    """The version a stream's handshake says the peer runs (none: release 0.1.0's), or why it cannot be read."""
    wire, release = headers.get(WIRE_VERSION_HEADER), headers.get(RELEASE_HEADER, "")
    if wire is None:
        return UNVERSIONED
    if not wire.isascii() or not wire.isdigit() or len(wire) > 9 or len(release) > 64:
        return f"the {WIRE_VERSION_HEADER} header [{wire[:20]}] is not a wire version"
    return NodeVersion(release or UNVERSIONED.release, int(wire))


def too_old_problem(peer: NodeVersion, own: NodeVersion, minimum: int = MINIMUM_COMPATIBLE) -> str | None:
    """Why a peer of this version is refused at the handshake (naming both versions), if it is."""
    if peer.wire >= minimum:
        return None
    return (
        f"the peer runs release {peer.describe()}, below wire version {minimum}, the oldest that this node "
        f"(release {own.describe()}) talks to: upgrade the peer"
    )


class Undecodable(NamedTuple):
    """What can be read of a frame that does not decode as a message: its sender, the message's type, and its
    request id if it has one (None when not even that can be read)."""

    sender: str
    kind: str
    request_id: int | None


def read_undecodable(payload: bytes | bytearray | memoryview) -> Undecodable | None:
    try:
        raw = msgspec.json.decode(payload)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    message = raw.get("message") if isinstance(raw, dict) else None
    sender = raw.get("sender") if isinstance(raw, dict) else None
    if not isinstance(message, dict) or not isinstance(sender, str) or not isinstance(message.get("type"), str):
        return None
    request_id = message.get("request_id")
    kind = str(message["type"])[:64]
    return Undecodable(sender[:300], kind, request_id if isinstance(request_id, int) and request_id >= 0 else None)


def transport_app(
    on_message: Callable[[str, Message], None],
    auth: TransportAuth | None,
    max_body: int,
    max_chunk_size: int = DEFAULT_MAX_CHUNK_SIZE,
    current_term: Callable[[], int] = lambda: 0,
    refusals: Refusals | None = None,
    local_address: str = "",
    trust: TrustRestrictions | None = None,
    version: NodeVersion | None = None,
    on_undecodable: Callable[[Undecodable, str], None] | None = None,
    minimum_wire_version: int = MINIMUM_COMPATIBLE,
) -> web.Application:
    """`max_body`: the largest message, whole (a POST) or reassembled from chunks; `max_chunk_size`: the
    largest frame of a stream, besides the chunk header and MAC; `current_term`: the node's term, below which
    a chunked publication is dropped before it is buffered; `local_address`: this node's published transport
    address, which a signed POST must name as its receiver; `version`: this node's, and `minimum_wire_version`
    the oldest wire version it takes streams from; `on_undecodable`: told of each frame that does not decode as
    a message but names its sender and type (with the decoder's complaint)."""
    own = version if version is not None else newest()
    warnings = _RateLimitedWarnings()
    refused = refusals or Refusals()  # peers this node refused, for health
    replays = ReplayCache()
    # A signed POST from before this process started may have been seen by the one before it (whose replay
    # cache is gone): refused, as are those signed in the very second it started.
    started_at = int(time.time())
    streams: set[web.WebSocketResponse] = set()
    closing = asyncio.Event()

    async def receive(request: web.Request) -> web.Response:
        body = await request.read()
        if auth is not None:
            problem = auth.verify(request.headers, body)
            if problem is not None:
                warnings.warn("post 401", "refused a message from %s: %s", request.remote, problem)
                return _refused(refused, request, problem)
        try:
            envelope = decode_envelope(body)
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            warnings.warn("post 400", "refused a message from %s: %s", request.remote, error)
            return _error(400, "parse_exception", str(error))
        if auth is not None:
            signed_at = signed_at_or_problem(request.headers)
            assert isinstance(signed_at, int)  # verified above
            problem = replay_problem(envelope, signed_at, started_at, _receivers(request, local_address))
            problem = problem or replays.admit(envelope.request_nonce, signed_at)
            if problem is not None:
                warnings.warn("post replay", "refused a message from %s: %s", request.remote, problem)
                return _refused(refused, request, problem)
        on_message(envelope.sender, envelope.message)
        return web.Response(status=204)

    async def stream(request: web.Request) -> web.StreamResponse:
        peer = request.remote or "?"
        if auth is not None:
            problem = auth.verify_stream_handshake(request.headers)
            if problem is not None:
                warnings.warn("stream 401", "refused a stream from %s: %s", peer, problem)
                return _refused(refused, request, problem)
        peer_runs = peer_version(request.headers)
        problem = peer_runs if isinstance(peer_runs, str) else too_old_problem(peer_runs, own, minimum_wire_version)
        if problem is not None:
            warnings.warn(f"version {peer}", "refused a stream from %s: %s", peer, problem)
            return _refused(refused, request, problem, status=400, error_type="illegal_state_exception")
        wanted = _HMAC_PROTOCOLS if auth is not None else _PLAIN_PROTOCOLS
        offered = _offered_protocols(request)
        protocol = next((candidate for candidate in wanted if candidate in offered), None)
        if protocol is None:
            return _error(400, "illegal_argument_exception", f"the stream needs subprotocol [{wanted[-1]}]")
        ws = web.WebSocketResponse(
            protocols=(protocol,),
            heartbeat=HEARTBEAT_S,
            timeout=CLOSE_TIMEOUT_S,  # for the peer's close frame, so that a hung peer cannot hold up our stop
            compress=False,
            # One frame: a whole message up to the chunk size, or a chunk. Larger messages come in chunks
            # (v2); a v1 sender's larger frame is refused (1009), see `_serve_stream`.
            max_msg_size=max_chunk_size + HEADER_BYTES + MAC_BYTES + 1,  # aiohttp refuses a frame of this size
        )
        await ws.prepare(request)
        if closing.is_set():
            await ws.close(code=WSCloseCode.GOING_AWAY, message=b"node stopping")
            return ws
        streams.add(ws)
        try:
            mac: StreamMac | None = None
            if auth is not None:
                nonce = os.urandom(NONCE_BYTES)
                mac = auth.stream_mac(nonce)
                await ws.send_bytes(nonce)
            reassembler = Reassembler(max_body, current_term) if protocol in _CHUNKED_PROTOCOLS else None
            await _serve_stream(ws, mac, peer, on_message, warnings, reassembler, on_undecodable)
        except (ConnectionError, aiohttp.ClientError) as error:
            log.debug("stream from %s: %r", peer, error)
        finally:
            streams.discard(ws)
        return ws

    async def watch(request: web.Request) -> web.StreamResponse:
        # Held open until this process stops: a follower watching its master sees the connection close at
        # once when the master dies (kill -9 included), instead of waiting for the next leader check.
        problem = auth.verify(request.headers, b"") if auth is not None else None
        if problem is not None:
            return _refused(refused, request, problem)
        response = web.StreamResponse(status=200)
        await response.prepare(request)
        await closing.wait()
        return response

    async def on_shutdown(app: web.Application) -> None:
        closing.set()
        await asyncio.gather(
            *(ws.close(code=WSCloseCode.GOING_AWAY, message=b"node stopping") for ws in list(streams)),
            return_exceptions=True,
        )

    @web.middleware
    async def node_certificates_only(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        assert trust is not None
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport is not None else None
        problem = trust.problem(ssl_object.getpeercert() if ssl_object is not None else None)
        if problem is not None:
            warnings.warn("trust", "refused a transport request from %s: %s", request.remote, problem)
            return _refused(refused, request, problem, status=403)
        return await handler(request)

    app = web.Application(client_max_size=max_body, middlewares=[node_certificates_only] if trust else [])
    app.router.add_post(MESSAGE_PATH, receive)
    app.router.add_get(STREAM_PATH, stream)
    app.router.add_get(WATCH_PATH, watch)
    app.on_shutdown.append(on_shutdown)
    return app


async def _serve_stream(
    ws: web.WebSocketResponse,
    mac: StreamMac | None,
    peer: str,
    on_message: Callable[[str, Message], None],
    warnings: _RateLimitedWarnings,
    reassembler: Reassembler | None = None,
    on_undecodable: Callable[[Undecodable, str], None] | None = None,
) -> None:
    """Pass each frame's envelope to `on_message`, in order, until the stream ends or a frame fails its MAC.
    With a `reassembler` (v2), chunk frames are collected and their message passed on once whole and verified.
    A frame that does not decode goes to `on_undecodable` when its sender and type can be read, and the next
    frame is read either way: one message this node does not know never costs the others on the stream."""
    try:
        await _serve_frames(ws, mac, peer, on_message, warnings, reassembler, on_undecodable)
    finally:
        if reassembler is not None:
            _log_discarded(warnings, peer, reassembler.close())


def _log_discarded(warnings: _RateLimitedWarnings, peer: str, discarded: Discarded | None) -> None:
    if discarded is not None:
        warnings.warn("chunks", "discarded a chunked message from %s: %s", peer, discarded.reason)


async def _serve_frames(
    ws: web.WebSocketResponse,
    mac: StreamMac | None,
    peer: str,
    on_message: Callable[[str, Message], None],
    warnings: _RateLimitedWarnings,
    reassembler: Reassembler | None,
    on_undecodable: Callable[[Undecodable, str], None] | None = None,
) -> None:
    while True:
        msg = await ws.receive()
        if msg.type is WSMsgType.BINARY:
            frame: bytes = msg.data
            body: bytes | memoryview | None = frame if mac is None else mac.open(frame)
            if body is None:
                warnings.warn("bad mac", "closing the stream from %s: a frame failed its MAC check", peer)
                await ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"bad frame MAC")
                return
            payload: bytes | bytearray | memoryview = body
            claimed: Complete | None = None
            if reassembler is not None and is_chunk(body):
                result = reassembler.accept(body)
                _log_discarded(warnings, peer, reassembler.take_interrupted())
                if not isinstance(result, Complete):
                    _log_discarded(warnings, peer, result)
                    continue
                payload, claimed = result.body, result
            try:
                envelope = decode_envelope(payload)  # type: ignore[arg-type]  # msgspec takes any buffer
            except (msgspec.ValidationError, msgspec.DecodeError) as error:
                undecodable = read_undecodable(payload)
                if undecodable is not None and on_undecodable is not None:
                    on_undecodable(undecodable, str(error))  # logs once per peer and kind itself
                else:
                    warnings.warn(
                        f"undecodable {peer}", "dropped a frame from %s that is not a message: %s", peer, error
                    )
                continue
            if claimed is not None:
                mismatch = header_mismatch(envelope.message, claimed.term, claimed.version)
                if mismatch is not None:
                    _log_discarded(warnings, peer, Discarded(-1, mismatch))
                    continue
            try:
                on_message(envelope.sender, envelope.message)
            except Exception:
                log.exception("failed to handle a %s from %s", type(envelope.message).__name__, envelope.sender)
        elif msg.type is WSMsgType.TEXT:
            warnings.warn("text", "closing the stream from %s: a text frame", peer)
            await ws.close(code=WSCloseCode.UNSUPPORTED_DATA, message=b"text frames are not used")
            return
        elif msg.type is WSMsgType.ERROR:
            # E.g. a frame over the size limit: aiohttp has already closed the stream (1009).
            warnings.warn(
                "stream error",
                "stream from %s failed: %s (frames are limited by transport.max_chunk_size; a node of an older "
                "version sends a large message as one frame)",
                peer,
                msg.data,
            )
            return
        else:  # CLOSE, CLOSING, CLOSED
            return


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
