"""The transport's receiving side: the app that serves the stream, the POST route (older senders during a
rolling upgrade) and the connection watch.

A stream's handshake is authenticated (see `auth`) and its sender's version checked (see `compatibility`);
then each frame's envelope goes to `on_message`, in order, chunk frames reassembled first (see `chunked`). A
frame that does not decode as a message (a newer node's) never closes the stream that carries it: the node is
told (`on_undecodable`, which answers a forwarded request with a refusal its sender understands) and reads the
next frame; it logs once per peer and kind, not per frame.

TLS: with `transport.ssl.enabled` the listener is served with the mutual-TLS context of `tls` (in `cli`), and
with trust restrictions only node certificates are served.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable

import aiohttp
import msgspec
from aiohttp import WSCloseCode, WSMsgType, web

from coordinated.coordination.client import error_body
from coordinated.coordination.messages import Envelope, Message, decode_envelope
from coordinated.coordination.wire_versions import MINIMUM_COMPATIBLE, NodeVersion, newest
from coordinated.sidecar.peers.auth import (
    MAC_BYTES,
    NONCE_BYTES,
    ReplayCache,
    StreamMac,
    TransportAuth,
    signed_at_or_problem,
)
from coordinated.sidecar.peers.chunked import HEADER_BYTES, Complete, Discarded, Reassembler, header_mismatch, is_chunk
from coordinated.sidecar.peers.compatibility import peer_version, too_old_problem
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
    Undecodable,
    read_undecodable,
)
from coordinated.sidecar.peers.refusals import REFUSAL_HEADER, Refusals
from coordinated.sidecar.peers.tls import TrustRestrictions

log = logging.getLogger("coordinated.transport")


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
    warnings = RateLimitedWarnings()
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
        wanted = HMAC_PROTOCOLS if auth is not None else PLAIN_PROTOCOLS
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
            reassembler = Reassembler(max_body, current_term) if protocol in CHUNKED_PROTOCOLS else None
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
    warnings: RateLimitedWarnings,
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


def _log_discarded(warnings: RateLimitedWarnings, peer: str, discarded: Discarded | None) -> None:
    if discarded is not None:
        warnings.warn("chunks", "discarded a chunked message from %s: %s", peer, discarded.reason)


async def _serve_frames(
    ws: web.WebSocketResponse,
    mac: StreamMac | None,
    peer: str,
    on_message: Callable[[str, Message], None],
    warnings: RateLimitedWarnings,
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


def _offered_protocols(request: web.Request) -> list[str]:
    header = request.headers.get(aiohttp.hdrs.SEC_WEBSOCKET_PROTOCOL, "")
    return [protocol.strip() for protocol in header.split(",") if protocol.strip()]


def _error(status: int, error_type: str, reason: str) -> web.Response:
    return web.json_response(error_body(error_type, reason, status), status=status)


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
