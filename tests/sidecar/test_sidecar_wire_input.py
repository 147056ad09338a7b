"""Hostile input on the transport port: out-of-range numbers, invalid UTF-8, replayed signed POSTs."""

from __future__ import annotations

import asyncio
import logging
import os
import time

import aiohttp
import msgspec
import pytest
from test_sidecar_transport import SECRET, Peer, make_sender, raw_stream, run, until

from coordinated.coordination.counters import LONG_MAX
from coordinated.coordination.messages import Envelope, LeaderCheck, Message, encode_envelope
from coordinated.coordination.state import DiscoveryNode
from coordinated.sidecar.peers.auth import MAX_CLOCK_SKEW_S, NONCE_BYTES, ReplayCache, TransportAuth
from coordinated.sidecar.peers.framing import MESSAGE_PATH

pytestmark = pytest.mark.timeout(60)

NODE = msgspec.json.encode(DiscoveryNode("id1", "node1", "127.0.0.1:9300")).decode()
HUGE_TERM = (
    f'{{"sender":"127.0.0.1:1","message":{{"type":"start_join","candidate":{NODE},"term":{"9" * 4300}}}}}'.encode()
)
OVER_LONG_TERM = (
    f'{{"sender":"127.0.0.1:1","message":{{"type":"start_join","candidate":{NODE},"term":{LONG_MAX + 1}}}}}'.encode()
)
BAD_UTF8 = b'{"sender":"127.0.0.1:1\xff\xfe","message":{"type":"leader_check","source_id":"a","request_id":1}}'
BAD_BODIES = [HUGE_TERM, OVER_LONG_TERM, BAD_UTF8]


async def post(session: aiohttp.ClientSession, peer: Peer, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    async with session.post(f"http://{peer.address}{MESSAGE_PATH}", data=body, headers=headers) as response:
        return response.status, await response.text()


@pytest.mark.parametrize("secret", [None, SECRET])
@pytest.mark.parametrize("body", BAD_BODIES, ids=["huge_term", "term_over_long", "invalid_utf8"])
def test_a_bad_post_gets_400_and_never_reaches_the_node(
    secret: bytes | None, body: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        auth = TransportAuth(secret) if secret else None
        peer = await Peer(auth=auth).start()
        async with aiohttp.ClientSession() as session:
            headers = auth.sign(body) if auth is not None else {}
            status, text = await post(session, peer, body, headers)
        assert status == 400, text
        assert msgspec.json.decode(text)["error"]["type"] == "parse_exception"
        assert peer.received == []
        await peer.stop()

    with caplog.at_level(logging.INFO):
        run(scenario())
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert len([record for record in caplog.records if "refused a message" in record.getMessage()]) == 1


@pytest.mark.parametrize("secret", [None, SECRET])
@pytest.mark.parametrize("body", BAD_BODIES, ids=["huge_term", "term_over_long", "invalid_utf8"])
def test_a_bad_frame_never_reaches_the_node_and_the_stream_goes_on(secret: bytes | None, body: bytes) -> None:
    """A frame that does not decode is dropped (the node is told of it when it names a sender and a type); the
    messages after it on the same stream arrive: one bad message never costs the others."""

    async def scenario() -> None:
        auth = TransportAuth(secret) if secret else None
        peer = await Peer(auth=auth).start()
        good = encode_envelope(Envelope("127.0.0.1:1", LeaderCheck("a", 7)))
        async with aiohttp.ClientSession() as session:
            ws, nonce = await raw_stream(session, peer, auth)
            mac = auth.stream_mac(nonce) if auth is not None else None
            for frame in (body, good):
                await ws.send_bytes(mac.seal(frame) if mac is not None else frame)
            await until(lambda: len(peer.received) == 1)
            assert not ws.closed
            await ws.close()
        assert peer.received == [("127.0.0.1:1", LeaderCheck("a", 7))]
        await peer.stop()

    run(scenario())


def signed_post(
    auth: TransportAuth, message: Message, receiver: str, nonce: str | None = None, signed_at: float | None = None
) -> tuple[bytes, dict[str, str]]:
    """A signed POST to `receiver`, signed a second from now by default (a receiver refuses what was signed in
    the second it started, and a test's peer has just started)."""
    request_nonce = os.urandom(NONCE_BYTES).hex() if nonce is None else nonce
    body = encode_envelope(Envelope("127.0.0.1:1", message, request_nonce=request_nonce, receiver=receiver))
    now = time.time() + 1 if signed_at is None else signed_at
    return body, {"Content-Type": "application/json", **auth.sign(body, now)}


def test_a_replayed_signed_post_is_refused() -> None:
    async def scenario() -> None:
        auth = TransportAuth(SECRET)
        peer = await Peer(auth=auth).start()
        async with aiohttp.ClientSession() as session:
            body, headers = signed_post(auth, LeaderCheck("a", 1), peer.address)
            assert (await post(session, peer, body, headers))[0] == 204
            status, text = await post(session, peer, body, headers)  # captured and sent again
            assert status == 401 and "replayed" in text
            body, headers = signed_post(auth, LeaderCheck("a", 2), peer.address, nonce="")  # no nonce: not unique
            status, text = await post(session, peer, body, headers)
            assert status == 401 and "request_nonce" in text
            body, headers = signed_post(auth, LeaderCheck("a", 3), peer.address)  # a fresh request is fine
            assert (await post(session, peer, body, headers))[0] == 204
        assert [message for _, message in peer.received] == [LeaderCheck("a", 1), LeaderCheck("a", 3)]
        await peer.stop()

    run(scenario())


def test_a_signed_post_for_another_node_or_from_before_the_start_is_refused() -> None:
    """What makes a replay fail after a restart (the replay cache is new) or on another node (it has its own)."""

    async def scenario() -> None:
        auth = TransportAuth(SECRET)
        peer = await Peer(auth=auth).start()
        async with aiohttp.ClientSession() as session:
            for receiver in ("127.0.0.1:1", ""):
                body, headers = signed_post(auth, LeaderCheck("a", 1), receiver)
                status, text = await post(session, peer, body, headers)
                assert status == 401 and "not to this node" in text, text
            body, headers = signed_post(auth, LeaderCheck("a", 2), peer.address, signed_at=time.time() - 5)
            status, text = await post(session, peer, body, headers)
            assert status == 401 and "signed before this node started" in text, text
        assert peer.received == []
        await peer.stop()

    run(scenario())


def test_the_sender_posts_unique_requests() -> None:
    # The POST fallback (a peer without the stream endpoint) sends each message with its own nonce.
    async def scenario() -> None:
        auth = TransportAuth(SECRET)
        peer = await Peer(auth=auth).start()
        sender = make_sender([], auth=auth)
        await sender.start()
        await asyncio.sleep(1.1)  # a receiver refuses what was signed in the second it started
        for i in range(3):
            await sender._post_or_report(peer.address, LeaderCheck("a", i))
        await until(lambda: len(peer.received) == 3)
        await sender.close()
        await peer.stop()

    run(scenario())


def test_replay_cache_forgets_a_nonce_only_once_its_signature_expired_and_is_bounded() -> None:
    cache = ReplayCache(max_entries=2)
    assert cache.admit("a", signed_at=1000, now=1000) is None
    assert cache.admit("a", signed_at=1000, now=1000 + MAX_CLOCK_SKEW_S) is not None  # still valid: refused
    assert cache.admit("b", signed_at=1100, now=1100) is None
    full = cache.admit("c", signed_at=1100, now=1100)
    assert full is not None and "too many" in full
    # "a" expires after 1000 + MAX_CLOCK_SKEW_S; then there is room again, and "b" is still remembered.
    assert cache.admit("c", signed_at=1301, now=1000 + MAX_CLOCK_SKEW_S + 1) is None
    assert cache.admit("b", signed_at=1100, now=1000 + MAX_CLOCK_SKEW_S + 1) is not None
    assert len(cache) == 2
