"""The peer transport in one process: WebSocket streams, their authentication, failures and the POST fallback."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp
import msgspec
import pytest
from aiohttp import WSMsgType, web

from coordinated.coordination.context import Mode
from coordinated.coordination.messages import (
    Envelope,
    ForwardedRequest,
    LeaderCheck,
    Message,
    PeersRequest,
    decode_envelope,
    encode_envelope,
)
from coordinated.coordination.requests.keys import KvPut
from coordinated.coordination.state import DiscoveryNode
from coordinated.coordination.wire_versions import CURRENT, UNVERSIONED, newest
from coordinated.sidecar.observability.metrics import NodeMetrics, StatusSnapshot
from coordinated.sidecar.peers import compatibility, framing
from coordinated.sidecar.peers import sender as peer_sender
from coordinated.sidecar.peers.auth import MAC_BYTES, NONCE_BYTES, TransportAuth
from coordinated.sidecar.peers.compatibility import WIRE_VERSION_HEADER
from coordinated.sidecar.peers.framing import MESSAGE_PATH, PROTOCOL_HMAC, PROTOCOL_PLAIN, STREAM_PATH, Undecodable
from coordinated.sidecar.peers.receiver import transport_app
from coordinated.sidecar.peers.refusals import REFUSAL_HEADER, Refusals
from coordinated.sidecar.peers.sender import PeerSender, watch_until_closed
from coordinated.tools.localcluster import free_ports

pytestmark = pytest.mark.timeout(60)

SECRET = b"a-cluster-secret-of-enough-length"
SENDER = "127.0.0.1:1"


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


def check(i: int) -> LeaderCheck:
    return LeaderCheck(source_id="x", request_id=i)


class Peer:
    """A transport app on 127.0.0.1 that records what it receives and which requests it answered how."""

    def __init__(
        self,
        auth: TransportAuth | None = None,
        max_body: int = 1024 * 1024,
        port: int | None = None,
        max_chunk_size: int = framing.DEFAULT_MAX_CHUNK_SIZE,
        current_term: Callable[[], int] = lambda: 0,
        minimum_wire_version: int = compatibility.MINIMUM_COMPATIBLE,
    ) -> None:
        self.auth = auth
        self.minimum_wire_version = minimum_wire_version
        self.undecodable: list[tuple[Undecodable, str]] = []  # frames that did not decode, and why
        self.refusals = Refusals()
        self.max_body = max_body
        self.max_chunk_size = max_chunk_size
        self.current_term = current_term
        self.port = port if port is not None else free_ports(1)[0]
        self.received: list[tuple[str, Message]] = []
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status)
        self.runner: web.AppRunner | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def streams_opened(self) -> int:
        return sum(1 for method, path, status in self.requests if path == STREAM_PATH and status == 101)

    def app(self) -> web.Application:
        return transport_app(
            lambda sender, message: self.received.append((sender, message)),
            self.auth,
            self.max_body,
            self.max_chunk_size,
            self.current_term,
            local_address=self.address,
            refusals=self.refusals,
            on_undecodable=lambda frame, problem: self.undecodable.append((frame, problem)),
            minimum_wire_version=self.minimum_wire_version,
        )

    async def start(self, app: web.Application | None = None) -> Peer:
        app = app if app is not None else self.app()

        async def record(request: web.Request, response: web.StreamResponse) -> None:
            # When the status line is sent: a stream is counted when it opens, not when it ends.
            self.requests.append((request.method, request.path, response.status))

        app.on_response_prepare.append(record)
        self.runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port, reuse_address=True).start()
        return self

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()
        self.runner = None


def old_version_app(auth: TransportAuth | None, received: list[tuple[str, Message]]) -> web.Application:
    """A node of the previous version: POST only, no stream endpoint."""

    async def receive(request: web.Request) -> web.Response:
        body = await request.read()
        if auth is not None and auth.verify(request.headers, body) is not None:
            return web.Response(status=401)
        envelope = decode_envelope(body)
        received.append((envelope.sender, envelope.message))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post(MESSAGE_PATH, receive)
    return app


def make_sender(
    failures: list[tuple[str, Message]],
    auth: TransportAuth | None = None,
    retries: int = 2,
    request_timeout_s: float = 5.0,
) -> PeerSender:
    return PeerSender(
        SENDER,
        lambda destination, message: failures.append((destination, message)),
        auth,
        request_timeout_s=request_timeout_s,
        connect_timeout_s=1.0,
        retries=retries,
        queue_size=10_000,
    )


async def connected(failures: list[tuple[str, Message]], auth: TransportAuth | None = None) -> tuple[Peer, PeerSender]:
    """A peer, and a started sender whose stream to it is open (one message delivered)."""
    peer = await Peer(auth=auth).start()
    sender = make_sender(failures, auth=auth)
    await sender.start()
    sender.send(peer.address, check(0))
    await until(lambda: len(peer.received) == 1)
    return peer, sender


async def stream_reset(*args: object) -> None:
    """A write on a stream the peer has reset."""
    raise aiohttp.ClientConnectionResetError("Cannot write to closing transport")


async def until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("timed out waiting for a condition")
        await asyncio.sleep(0.01)


async def raw_stream(
    session: aiohttp.ClientSession, peer: Peer, auth: TransportAuth | None, protocol: str | None = None
) -> tuple[aiohttp.ClientWebSocketResponse, bytes]:
    """A hand-made client: the handshake done right, then whatever frames the test sends."""
    headers = auth.sign_stream_handshake() if auth is not None else {}
    if protocol is None:
        protocol = PROTOCOL_HMAC if auth is not None else PROTOCOL_PLAIN
    ws = await session.ws_connect(f"http://{peer.address}{STREAM_PATH}", protocols=(protocol,), headers=headers)
    nonce = b""
    if auth is not None:
        msg = await ws.receive(timeout=5)
        assert msg.type is WSMsgType.BINARY and len(msg.data) == NONCE_BYTES
        nonce = msg.data
    return ws, nonce


async def close_code(ws: aiohttp.ClientWebSocketResponse) -> int | None:
    """Read until the server closes the stream; its close code."""
    while True:
        msg = await ws.receive(timeout=5)
        if msg.type is WSMsgType.CLOSE:
            return int(msg.data)
        if msg.type in (WSMsgType.CLOSED, WSMsgType.CLOSING, WSMsgType.ERROR):
            return ws.close_code


def envelope(message: Message) -> bytes:
    return encode_envelope(Envelope(SENDER, message))


# -- delivery ------------------------------------------------------------------------------------------------


def test_many_messages_arrive_in_order_over_one_stream() -> None:
    async def scenario() -> None:
        peer = await Peer().start()
        failures: list[tuple[str, Message]] = []
        sender = make_sender(failures)
        await sender.start()
        messages = [check(i) for i in range(2000)]
        for message in messages[:1000]:
            sender.send(peer.address, message)
        await asyncio.sleep(0)  # the first burst opens the stream; the second is queued meanwhile
        for message in messages[1000:]:
            sender.send(peer.address, message)
        await sender.flush(10)
        await sender.close()  # a graceful close: every frame written before it has been read
        assert peer.received == [(SENDER, message) for message in messages]
        assert peer.streams_opened() == 1
        assert [r for r in peer.requests if r[1] == MESSAGE_PATH] == []
        assert failures == []
        assert sender.bytes_sent == {peer.address: sum(len(envelope(m)) for m in messages)}
        await peer.stop()

    run(scenario())


class CountingTransport:
    """Stands in for a stream's transport and counts the writes that reach it."""

    def __init__(self, inner: asyncio.Transport) -> None:
        self.inner = inner
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1
        self.inner.write(data)

    def is_closing(self) -> bool:
        return self.inner.is_closing()

    def get_extra_info(self, name: str, default: object = None) -> object:
        return self.inner.get_extra_info(name, default)


@pytest.mark.parametrize("secret", [None, SECRET])
def test_messages_queued_in_one_loop_turn_leave_in_one_socket_write(secret: bytes | None) -> None:
    async def scenario() -> None:
        auth = TransportAuth(secret) if secret else None
        failures: list[tuple[str, Message]] = []
        peer, sender = await connected(failures, auth)
        writer = sender.streams[peer.address].ws._writer
        counting = CountingTransport(writer.transport)
        writer.transport = counting  # type: ignore[assignment]
        for i in range(1, 51):
            sender.send(peer.address, check(i))
        await until(lambda: len(peer.received) == 51)
        assert [message for _, message in peer.received] == [check(i) for i in range(51)]
        assert counting.writes == 1 and failures == []
        sender.send(peer.address, check(51))  # a burst of one: written as it is
        await until(lambda: len(peer.received) == 52)
        assert counting.writes == 2 and peer.streams_opened() == 1
        await sender.close()
        await peer.stop()

    run(scenario())


def test_sent_bytes_are_counted_by_peer_name_across_address_changes() -> None:
    # A pod restarted with a new IP is the same node: its bytes continue under its name, never its address.
    async def scenario() -> None:
        before, after = await Peer().start(), await Peer().start()
        names = {before.address: "demo-1", after.address: "demo-1"}
        failures: list[tuple[str, Message]] = []
        sender = PeerSender(
            SENDER,
            lambda destination, message: failures.append((destination, message)),
            None,
            request_timeout_s=5.0,
            connect_timeout_s=1.0,
            retries=0,
            queue_size=100,
            peer_name=lambda address: names.get(address, "unknown"),
        )
        await sender.start()
        sender.send(before.address, check(1))
        await sender.flush(5)
        first = sender.bytes_sent["demo-1"]
        sender.send(after.address, check(2))
        sender.send("seed.example:9300", check(3))  # no node known there (yet)
        await sender.flush(5)
        assert sender.bytes_sent == {"demo-1": first + len(envelope(check(2))), "unknown": len(envelope(check(3)))}
        await sender.close()
        await before.stop()
        await after.stop()

    run(scenario())


def test_the_sent_bytes_metric_is_labelled_by_peer_name() -> None:
    snapshot = StatusSnapshot(
        current_term=1,
        mode=Mode.LEADER,
        applied_version=1,
        applied_nodes=2,
        elections_won=1,
        failed_publications=0,
        lagging_nodes_removed=0,
        history_bytes=0,
        persisted_bytes=0,
        sent_bytes={"demo-1": 120},
        dropped_messages=0,
    )
    text = NodeMetrics(lambda: snapshot).render().decode()
    assert 'coordinated_transport_sent_bytes_total{peer="demo-1"} 120.0' in text


def test_stream_outlives_the_request_timeout() -> None:
    # The session's total timeout bounds the handshake, not the life of the stream.
    async def scenario() -> None:
        peer = await Peer().start()
        failures: list[tuple[str, Message]] = []
        sender = make_sender(failures, request_timeout_s=0.3)
        await sender.start()
        sender.send(peer.address, check(1))
        await until(lambda: len(peer.received) == 1)
        await asyncio.sleep(0.8)
        sender.send(peer.address, check(2))
        await until(lambda: len(peer.received) == 2)
        assert peer.streams_opened() == 1 and failures == []
        await sender.close()
        await peer.stop()

    run(scenario())


# -- authentication ------------------------------------------------------------------------------------------


def test_authenticated_stream_with_the_right_secret() -> None:
    async def scenario() -> None:
        auth = TransportAuth(SECRET)
        peer = await Peer(auth=auth).start()
        failures: list[tuple[str, Message]] = []
        sender = make_sender(failures, auth=TransportAuth(SECRET))
        await sender.start()
        for i in range(100):
            sender.send(peer.address, check(i))
        await sender.flush(5)
        await sender.close()
        assert [message for _, message in peer.received] == [check(i) for i in range(100)]
        assert peer.streams_opened() == 1 and failures == []
        await peer.stop()

    run(scenario())


@pytest.mark.parametrize("sender_secret", [b"another-secret-of-enough-length!", None])
def test_stream_refused_with_a_wrong_or_missing_secret(sender_secret: bytes | None) -> None:
    async def scenario() -> None:
        peer = await Peer(auth=TransportAuth(SECRET)).start()
        failures: list[tuple[str, Message]] = []
        sender = make_sender(failures, auth=TransportAuth(sender_secret) if sender_secret else None)
        await sender.start()
        sender.send(peer.address, check(1))
        await sender.flush(5)
        await asyncio.sleep(0.1)
        assert peer.received == []
        assert (("GET", STREAM_PATH, 401)) in peer.requests
        assert peer.streams_opened() == 0
        assert failures == []  # refused, like a refused POST: not a connection failure
        await sender.close()
        await peer.stop()

    run(scenario())


def test_tampered_injected_or_replayed_frames_are_rejected() -> None:
    async def scenario() -> None:
        auth = TransportAuth(SECRET)
        peer = await Peer(auth=auth).start()
        failures: list[tuple[str, Message]] = []
        sender = make_sender(failures, auth=auth)
        await sender.start()
        sender.send(peer.address, check(0))  # an honest stream, open during the attacks
        await until(lambda: len(peer.received) == 1)
        evil = PeersRequest(DiscoveryNode("evil", "evil", "127.0.0.1:9", ("master",)), (), "cluster")
        async with aiohttp.ClientSession() as session:
            # A frame with a made-up MAC.
            ws, _ = await raw_stream(session, peer, auth)
            await ws.send_bytes(os.urandom(MAC_BYTES) + envelope(evil))
            assert await close_code(ws) == aiohttp.WSCloseCode.POLICY_VIOLATION
            # A frame without any MAC.
            ws, _ = await raw_stream(session, peer, auth)
            await ws.send_bytes(envelope(evil))
            assert await close_code(ws) == aiohttp.WSCloseCode.POLICY_VIOLATION
            # An authentic frame, then an altered one (one body byte changed, MAC kept).
            ws, nonce = await raw_stream(session, peer, auth)
            mac = auth.stream_mac(nonce)
            first = mac.seal(envelope(check(1)))
            await ws.send_bytes(first)
            altered = bytearray(mac.seal(envelope(check(2))))
            altered[-3] ^= 0x01
            await ws.send_bytes(bytes(altered))
            assert await close_code(ws) == aiohttp.WSCloseCode.POLICY_VIOLATION
            # A replayed frame: in the same stream (the counter moved on) and in a new stream (a new nonce).
            ws, nonce = await raw_stream(session, peer, auth)
            replayed = auth.stream_mac(nonce).seal(envelope(check(3)))
            await ws.send_bytes(replayed)
            await ws.send_bytes(replayed)
            assert await close_code(ws) == aiohttp.WSCloseCode.POLICY_VIOLATION
            ws, _ = await raw_stream(session, peer, auth)
            await ws.send_bytes(replayed)
            assert await close_code(ws) == aiohttp.WSCloseCode.POLICY_VIOLATION
            # A frame sealed with the wrong secret.
            ws, nonce = await raw_stream(session, peer, auth)
            await ws.send_bytes(TransportAuth(b"x" * 32).stream_mac(nonce).seal(envelope(evil)))
            assert await close_code(ws) == aiohttp.WSCloseCode.POLICY_VIOLATION
            # A text frame.
            ws, _ = await raw_stream(session, peer, auth)
            await ws.send_str("hello")
            assert await close_code(ws) == aiohttp.WSCloseCode.UNSUPPORTED_DATA
        # Only the authentic frames were passed on, and the honest stream still works.
        assert [message for _, message in peer.received] == [check(0), check(1), check(3)]
        sender.send(peer.address, check(4))
        await until(lambda: len(peer.received) == 4)
        assert peer.received[-1] == (SENDER, check(4))
        assert peer.streams_opened() == 8 and failures == []
        await sender.close()
        await peer.stop()

    run(scenario())


@pytest.mark.parametrize("secret", [None, SECRET])
def test_a_frame_that_does_not_decode_closes_nothing_and_a_newer_nodes_message_is_reported(
    secret: bytes | None,
) -> None:
    """A newer node's message type, or a request this release does not know, arrives among messages it does
    know: the stream goes on, and the node is told what it could read of it (sender, type, request id)."""

    async def scenario() -> None:
        auth = TransportAuth(secret) if secret else None
        failures: list[tuple[str, Message]] = []
        peer, sender = await connected(failures, auth)
        unknown_request = {"type": "forwarded_request", "source_id": "n", "request_id": 7, "request": {"op": "new"}}
        bad_bodies = [
            b"not json",
            b'{"sender": "x", "message": {"type": "no_such_message"}}',
            b"",
            b"\xff" * 50,
            msgspec.json.encode({"sender": SENDER, "message": unknown_request}),
        ]
        async with aiohttp.ClientSession() as session:
            ws, nonce = await raw_stream(session, peer, auth)
            mac = auth.stream_mac(nonce) if auth is not None else None
            for i, body in enumerate(bad_bodies, start=1):
                await ws.send_bytes(mac.seal(body) if mac is not None else body)
                good = envelope(check(i))
                await ws.send_bytes(mac.seal(good) if mac is not None else good)
            await until(lambda: len(peer.received) == 1 + len(bad_bodies))
            assert not ws.closed
            await ws.close()
        assert [message for _, message in peer.received] == [check(i) for i in range(len(bad_bodies) + 1)]
        assert [frame for frame, _ in peer.undecodable] == [
            Undecodable("x", "no_such_message", None),
            Undecodable(SENDER, "forwarded_request", 7),
        ]
        assert "Invalid value 'no_such_message'" in peer.undecodable[0][1]
        assert "Invalid value 'new'" in peer.undecodable[1][1]
        sender.send(peer.address, check(9))
        await until(lambda: peer.received[-1] == (SENDER, check(9)))
        assert failures == [] and peer.streams_opened() == 2
        await sender.close()
        await peer.stop()

    run(scenario())


def test_a_peer_below_the_oldest_wire_version_is_refused_at_the_handshake_naming_both_versions() -> None:
    async def scenario() -> None:
        peer = await Peer(minimum_wire_version=CURRENT + 1).start()
        failures: list[tuple[str, Message]] = []
        sender = make_sender(failures)
        await sender.start()
        sender.send(peer.address, check(0))
        await until(lambda: bool(sender.refusals.recent()))
        own = f"release {newest().describe()}"
        expected = (
            f"the peer runs release {newest().describe()}, below wire version {CURRENT + 1}, the oldest that this "
            f"node ({own}) talks to: upgrade the peer"
        )
        assert [refusal.reason for refusal in peer.refusals.recent()] == [expected]
        assert [refusal.reason for refusal in sender.refusals.recent()] == [f"400 {expected}"]
        assert peer.received == [] and peer.streams_opened() == 0
        # What release 0.1.0 sends (no version) is wire version 1; a header that is not a version is refused.
        async with aiohttp.ClientSession() as session:
            url = f"http://{peer.address}{STREAM_PATH}"
            for headers, needle in (({}, "release 0.1.0 (wire version 1)"), ({WIRE_VERSION_HEADER: "x"}, "is not")):
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await session.ws_connect(url, protocols=(PROTOCOL_PLAIN,), headers=headers)
                assert refused.value.status == 400 and needle in (refused.value.headers or {})[REFUSAL_HEADER]
        await sender.close()
        await peer.stop()

    run(scenario())


def test_the_sender_tells_its_version_on_the_handshake_and_release_0_1_0s_streams_are_taken() -> None:
    async def scenario() -> None:
        seen: list[Any] = []
        peer = Peer()
        app = peer.app()

        @web.middleware
        async def headers(request: web.Request, handler: Any) -> web.StreamResponse:
            seen.append(compatibility.peer_version(request.headers))
            return await handler(request)

        app.middlewares.append(headers)
        await peer.start(app)
        failures: list[tuple[str, Message]] = []
        sender = make_sender(failures)
        await sender.start()
        sender.send(peer.address, check(0))
        await until(lambda: len(peer.received) == 1)
        assert seen == [newest()]
        async with aiohttp.ClientSession() as session:
            ws, _ = await raw_stream(session, peer, None)  # as release 0.1.0 opens it: no version headers
            await ws.send_bytes(envelope(check(1)))
            await until(lambda: len(peer.received) == 2)
            await ws.close()
        assert seen[-1] == UNVERSIONED
        await sender.close()
        await peer.stop()

    run(scenario())


def test_an_oversized_frame_is_refused() -> None:
    # A frame over the chunk size (a v1 sender's whole message) closes its stream with 1009; a v2 sender's
    # message of that size goes in chunks and arrives.
    async def scenario() -> None:
        peer = await Peer(max_chunk_size=4096).start()
        failures: list[tuple[str, Message]] = []
        sender = make_sender(failures)
        sender.max_chunk_size = 4096
        await sender.start()
        big = PeersRequest(DiscoveryNode("n", "n", "127.0.0.1:9", ()), (), "c" * 8192)
        async with aiohttp.ClientSession() as session:
            ws, _ = await raw_stream(session, peer, None)
            await ws.send_bytes(envelope(big))
            assert await close_code(ws) == aiohttp.WSCloseCode.MESSAGE_TOO_BIG
        sender.send(peer.address, big)
        sender.send(peer.address, check(1))
        await until(lambda: len(peer.received) == 2)
        assert peer.received == [(SENDER, big), (SENDER, check(1))]
        assert peer.streams_opened() == 2  # the raw one and the sender's
        assert failures == []
        await sender.close()
        await peer.stop()

    run(scenario())


# -- failures ------------------------------------------------------------------------------------------------


def test_connection_refused_reports_each_message() -> None:
    async def scenario() -> None:
        address = f"127.0.0.1:{free_ports(1)[0]}"  # nothing listens there
        failures: list[tuple[str, Message]] = []
        sender = make_sender(failures, retries=2)
        await sender.start()
        started = asyncio.get_running_loop().time()
        sender.send(address, check(1))
        sender.send(address, check(2))
        await until(lambda: len(failures) == 2)
        assert failures == [(address, check(1)), (address, check(2))]
        # Queued in one loop turn, they were one burst: retried together with the backoff before both were
        # reported (an unreachable peer does not hold later messages up by one backoff per message).
        assert asyncio.get_running_loop().time() - started >= sum(peer_sender.RETRY_BACKOFF_S[:2])
        await sender.close()

    run(scenario())


def test_peer_restart_mid_stream() -> None:
    async def scenario() -> None:
        peer = await Peer().start()
        failures: list[tuple[str, Message]] = []
        sender = make_sender(failures, retries=1)
        await sender.start()
        for i in range(10):
            sender.send(peer.address, check(i))
        await until(lambda: len(peer.received) == 10)
        await peer.stop()  # closes the stream (going away)
        sender.send(peer.address, check(10))  # nobody listens: reported
        await until(lambda: len(failures) == 1)
        assert failures == [(peer.address, check(10))]
        restarted = await Peer(port=peer.port).start()
        for i in range(11, 21):
            sender.send(peer.address, check(i))
        await until(lambda: len(restarted.received) == 10)
        assert [message for _, message in restarted.received] == [check(i) for i in range(11, 21)]
        assert restarted.streams_opened() == 1 and len(failures) == 1
        await sender.close()
        await restarted.stop()

    run(scenario())


def test_a_message_whose_write_fails_is_resent_once_on_a_new_stream() -> None:
    async def scenario() -> None:
        failures: list[tuple[str, Message]] = []
        peer, sender = await connected(failures)

        def break_stream() -> None:
            sender.streams[peer.address].send = stream_reset  # type: ignore[method-assign]

        break_stream()
        sender.send(peer.address, check(1))
        await until(lambda: len(peer.received) == 2)
        assert peer.received[-1] == (SENDER, check(1)) and failures == []
        assert peer.streams_opened() == 2
        # A forwarded client request is not sent twice (if it had arrived, the write would run twice): it is
        # reported instead, and the core answers the client with "maybe applied".
        break_stream()
        forwarded = ForwardedRequest(source_id="x", request_id=7, request=KvPut("k", 1))
        sender.send(peer.address, forwarded)
        await until(lambda: len(failures) == 1)
        assert failures == [(peer.address, forwarded)]
        sender.send(peer.address, check(2))
        await until(lambda: len(peer.received) == 3)
        assert [message for _, message in peer.received] == [check(0), check(1), check(2)]
        await sender.close()
        await peer.stop()

    run(scenario())


def test_a_burst_whose_write_fails_is_resent_without_its_forwarded_requests() -> None:
    async def scenario() -> None:
        failures: list[tuple[str, Message]] = []
        peer, sender = await connected(failures)
        sender.streams[peer.address].send_joined = stream_reset  # type: ignore[method-assign]
        forwarded = ForwardedRequest(source_id="x", request_id=7, request=KvPut("k", 1))
        for message in (check(1), forwarded, check(2)):
            sender.send(peer.address, message)
        await until(lambda: len(peer.received) == 3)
        # No frame of the failed burst reached the peer: the others go again on a new stream, in order, and
        # the forwarded request is reported (the core answers "maybe applied") rather than sent twice.
        assert [message for _, message in peer.received] == [check(0), check(1), check(2)]
        assert failures == [(peer.address, forwarded)] and peer.streams_opened() == 2
        await sender.close()
        await peer.stop()

    run(scenario())


def test_the_messages_of_a_burst_written_before_a_break_are_not_sent_again() -> None:
    async def scenario() -> None:
        failures: list[tuple[str, Message]] = []
        peer, sender = await connected(failures)
        sender.streams[peer.address].send_message = stream_reset  # type: ignore[method-assign]
        large = LeaderCheck(source_id="x" * (peer_sender.JOIN_LIMIT + 1), request_id=2)  # written on its own
        for message in (check(1), large, check(3)):
            sender.send(peer.address, message)
        await until(lambda: len(peer.received) == 4)
        # check(1) went out before the large message broke the stream: only the large one and what followed it
        # are sent again, on a new stream, so the peer sees each message once and in order.
        await sender.flush(5)
        assert [message for _, message in peer.received] == [check(0), check(1), large, check(3)]
        assert failures == [] and peer.streams_opened() == 2
        await sender.close()
        await peer.stop()

    run(scenario())


# -- older peers, watches ------------------------------------------------------------------------------------


@pytest.mark.parametrize("secret", [None, SECRET])
def test_falls_back_to_post_for_an_older_peer(secret: bytes | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peer_sender, "UPGRADE_RETRY_S", 0.5)

    async def scenario() -> None:
        auth = TransportAuth(secret) if secret else None
        old = Peer(auth=auth)
        await old.start(old_version_app(auth, old.received))
        failures: list[tuple[str, Message]] = []
        sender = make_sender(failures, auth=auth)
        await sender.start()
        for i in range(20):
            sender.send(old.address, check(i))
        await until(lambda: len(old.received) == 20)
        assert [message for _, message in old.received] == [check(i) for i in range(20)]
        assert old.requests.count(("GET", STREAM_PATH, 404)) == 1  # tried once, then POSTs
        assert old.requests.count(("POST", MESSAGE_PATH, 204)) == 20
        # The peer is upgraded: after the retry interval the stream is used.
        await old.stop()
        new = await Peer(auth=auth, port=old.port).start()
        await asyncio.sleep(0.6)
        sender.send(new.address, check(20))
        await until(lambda: len(new.received) == 1)
        assert new.streams_opened() == 1 and failures == []
        await sender.close()
        await new.stop()

    run(scenario())


def test_watch_still_works_on_the_sender_session() -> None:
    async def scenario() -> None:
        auth = TransportAuth(SECRET)
        peer = await Peer(auth=auth).start()
        sender = make_sender([], auth=auth)
        await sender.start()
        sender.send(peer.address, check(1))
        await until(lambda: len(peer.received) == 1)
        assert sender.session is not None
        watch = asyncio.create_task(watch_until_closed(sender.session, peer.address, auth))
        await asyncio.sleep(0.2)
        assert not watch.done()
        await peer.stop()
        assert await asyncio.wait_for(watch, 5) == "connection closed"
        await sender.close()

    run(scenario())


def test_one_message_sent_to_several_peers_is_encoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A publication's diff goes to every follower as one object: its bytes are encoded once, not per peer."""
    encoded: list[Message] = []

    def counting(envelope: Envelope) -> bytes:
        encoded.append(envelope.message)
        return encode_envelope(envelope)

    monkeypatch.setattr(peer_sender, "encode_envelope", counting)
    sender = make_sender([])
    shared, other = LeaderCheck("n1", 7), LeaderCheck("n1", 8)
    first = sender._encode(shared)
    assert sender._encode(shared) is first
    assert decode_envelope(sender._encode(other)).message == other
    assert decode_envelope(first) == Envelope(SENDER, shared)
    assert encoded == [shared, other]
