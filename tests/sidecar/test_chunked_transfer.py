"""Chunked transfer of large peer messages: the reassembler's refusals one by one, then over real streams."""

from __future__ import annotations

import struct

import aiohttp
import pytest
from aiohttp import WSMsgType, web
from test_sidecar_transport import (
    SECRET,
    SENDER,
    Peer,
    make_sender,
    raw_stream,
    run,
    until,
)

from coordinated.coordination.messages import (
    Envelope,
    LeaderCheck,
    Message,
    PublishRequest,
    decode_envelope,
    encode_envelope,
)
from coordinated.coordination.state import ClusterState, DiscoveryNode, persistent
from coordinated.sidecar.peers.auth import TransportAuth
from coordinated.sidecar.peers.chunked import (
    HEADER_BYTES,
    MAGIC,
    Complete,
    Discarded,
    Reassembler,
    chunk_frames,
    header_mismatch,
    is_chunk,
)
from coordinated.sidecar.peers.framing import PROTOCOL_PLAIN, STREAM_PATH

pytestmark = pytest.mark.timeout(60)

_HEADER = struct.Struct(">4sQIIQQQ32s")
SOURCE = DiscoveryNode("m", "m", "127.0.0.1:9", ())


def body_of(size: int, seed: int = 0) -> bytes:
    return bytes((seed + i * 7) % 251 for i in range(size))


def frames(body: bytes, transfer_id: int = 1, chunk: int = 1000, term: int = 3, version: int = 9) -> list[bytes]:
    return list(chunk_frames(body, transfer_id, chunk, term, version))


def with_header(frame: bytes, **fields: int | bytes) -> bytes:
    """The frame with some header fields rewritten (a forgery)."""
    names = ("magic", "transfer_id", "index", "count", "total", "term", "version", "digest")
    values = dict(zip(names, _HEADER.unpack_from(frame), strict=True))
    values.update(fields)
    return _HEADER.pack(*(values[name] for name in names)) + frame[HEADER_BYTES:]


def feed(reassembler: Reassembler, chunks: list[bytes]) -> list[Complete | Discarded | None]:
    return [reassembler.accept(chunk) for chunk in chunks]


def discards(results: list[Complete | Discarded | None]) -> list[tuple[int, str]]:
    return [(i, result.reason) for i, result in enumerate(results) if isinstance(result, Discarded)]


def reassembler(current_term: int = 0, max_total: int = 1 << 20) -> Reassembler:
    return Reassembler(max_total, lambda: current_term)


# -- the reassembler -----------------------------------------------------------------------------------------


def test_chunks_in_order_give_back_the_whole_body() -> None:
    body = body_of(4500)
    chunks = frames(body)
    assert len(chunks) == 5 and all(is_chunk(chunk) and len(chunk) <= HEADER_BYTES + 1000 for chunk in chunks)
    results = feed(reassembler(), chunks)
    assert results[:-1] == [None] * 4
    assert results[-1] == Complete(body, 3, 9)


def test_a_transfer_cut_short_by_the_end_of_its_stream_is_dropped() -> None:
    receiver = reassembler()
    assert feed(receiver, frames(body_of(4500))[:3]) == [None] * 3
    assert receiver.pending_bytes == 3000
    closed = receiver.close()
    assert closed is not None and "interrupted after 3 of 5 chunks" in closed.reason
    assert receiver.pending_bytes == 0


def test_a_transfer_cut_short_by_a_new_one_is_dropped_and_the_new_one_completes() -> None:
    receiver = reassembler()
    first, second = body_of(4500, seed=1), body_of(2500, seed=2)
    feed(receiver, frames(first, transfer_id=1)[:2])
    results = feed(receiver, frames(second, transfer_id=2))
    interrupted = receiver.take_interrupted()
    assert (
        interrupted is not None and interrupted.transfer_id == 1 and "interrupted by transfer 2" in interrupted.reason
    )
    assert results[-1] == Complete(second, 3, 9)


def test_chunks_out_of_order_drop_the_transfer_at_the_first_gap() -> None:
    chunks = frames(body_of(4500))
    results = feed(reassembler(), [chunks[0], chunks[2], chunks[1], chunks[3], chunks[4]])
    assert discards(results) == [
        (1, "chunk 2 of transfer 1 (term 3, version 9, 4500 bytes) is out of order: expected 1")
    ]
    assert not any(isinstance(result, Complete) for result in results)  # its later chunks are skipped


def test_a_replayed_chunk_drops_the_transfer() -> None:
    chunks = frames(body_of(4500))
    results = feed(reassembler(), [chunks[0], chunks[1], chunks[1], *chunks[2:]])
    assert [i for i, _ in discards(results)] == [2] and "out of order" in discards(results)[0][1]
    assert not any(isinstance(result, Complete) for result in results)


def test_a_transfer_that_starts_past_its_first_chunk_is_dropped() -> None:
    results = feed(reassembler(), frames(body_of(4500))[1:])
    assert discards(results) == [(0, "chunk 1 of transfer 1 came without chunk 0")]
    assert results[1:] == [None] * 3


def test_a_forged_chunk_fails_the_checksum_of_the_whole() -> None:
    chunks = frames(body_of(4500))
    tampered = bytearray(chunks[2])
    tampered[HEADER_BYTES + 10] ^= 0xFF
    results = feed(reassembler(), [*chunks[:2], bytes(tampered), *chunks[3:]])
    assert discards(results) == [(4, "transfer 1 (term 3, version 9, 4500 bytes) failed its checksum")]


def test_chunks_of_another_message_under_the_same_transfer_id_are_refused() -> None:
    mine, other = frames(body_of(4500, seed=1)), frames(body_of(4500, seed=2))
    results = feed(reassembler(), [mine[0], other[1], *mine[2:]])
    assert discards(results) == [(1, "chunk 1 of transfer 1 (term 3, version 9, 4500 bytes) changes its header")]


def test_a_transfer_of_an_older_term_is_dropped_before_it_is_buffered() -> None:
    receiver = reassembler(current_term=4)
    results = feed(receiver, frames(body_of(4500), term=3))
    assert discards(results) == [(0, "transfer 1 (term 3, version 9, 4500 bytes) is of a term older than ours (4)")]
    assert receiver.pending_bytes == 0
    assert results[1:] == [None] * 4


def test_a_large_message_that_is_not_a_publication_has_no_term_to_be_old() -> None:
    body = body_of(4500)
    results = feed(reassembler(current_term=7), frames(body, term=0, version=0))
    assert results[-1] == Complete(bytearray(body), 0, 0)


def test_a_transfer_whose_term_the_node_leaves_mid_way_is_dropped() -> None:
    term = [3]
    receiver = Reassembler(1 << 20, lambda: term[0])
    chunks = frames(body_of(4500), term=3)
    assert feed(receiver, chunks[:2]) == [None, None]
    term[0] = 4  # a new election while the state was on its way
    results = feed(receiver, chunks[2:])
    assert [i for i, _ in discards(results)] == [0] and "older than ours (4)" in discards(results)[0][1]


def test_data_past_the_advertised_size_drops_the_transfer() -> None:
    receiver = reassembler()
    chunks = [with_header(chunk, total=3500) for chunk in frames(body_of(4500))]
    results = []
    for chunk in chunks:
        results.append(receiver.accept(chunk))
        assert receiver.pending_bytes <= 3500
    assert discards(results) == [
        (3, "chunk 3 of transfer 1 (term 3, version 9, 3500 bytes) goes past the advertised size")
    ]


def test_a_transfer_that_ends_short_of_its_advertised_size_is_dropped() -> None:
    chunks = [with_header(chunk, total=4600) for chunk in frames(body_of(4500))]
    results = feed(reassembler(), chunks)
    assert discards(results) == [
        (4, "transfer 1 (term 3, version 9, 4600 bytes) ended after 4500 bytes, short of its size")
    ]


def test_a_transfer_advertising_more_than_the_limit_is_refused_at_once() -> None:
    receiver = reassembler(max_total=4000)
    results = feed(receiver, frames(body_of(4500)))
    assert discards(results) == [(0, "transfer 1 advertises 4500 bytes in 5 chunks; the limit is 4000 bytes")]
    assert receiver.pending_bytes == 0


def test_a_frame_shorter_than_a_chunk_header_is_refused() -> None:
    results = feed(reassembler(), [MAGIC + b"\x00" * 10])
    assert discards(results) == [(0, "a chunk frame of 14 bytes is shorter than its header")]


def test_a_reassembled_message_must_be_what_its_chunks_claimed() -> None:
    publish = PublishRequest(SOURCE, term=3, version=9, state=ClusterState("c"))
    assert header_mismatch(publish, 3, 9) is None
    assert header_mismatch(publish, 3, 8) is not None
    assert header_mismatch(LeaderCheck("x", 1), 0, 0) is None
    assert header_mismatch(LeaderCheck("x", 1), 3, 9) is not None


# -- over real streams -----------------------------------------------------------------------------------------


def full_state(term: int, version: int, keys: int = 2000) -> PublishRequest:
    kv = persistent({f"key-{i:05d}": {"value": "v" * 40, "i": i} for i in range(keys)})
    state = ClusterState("c", version=version, kv=kv)
    return PublishRequest(SOURCE, term=term, version=version, state=state)


def wire(message: Message) -> bytes:
    return encode_envelope(Envelope(SENDER, message))


@pytest.mark.parametrize("secret", [None, SECRET])
def test_a_full_state_of_many_chunks_arrives_whole(secret: bytes | None) -> None:
    async def scenario() -> None:
        auth = TransportAuth(secret) if secret is not None else None
        peer = await Peer(auth=auth, max_chunk_size=4096, max_body=1 << 24).start()
        failures: list[tuple[str, Message]] = []
        sender = make_sender(failures, auth=auth)
        sender.max_chunk_size = 4096
        await sender.start()
        publish = full_state(term=2, version=5)
        assert len(wire(publish)) > 20 * 4096  # more than a few chunks
        sender.send(peer.address, publish)
        sender.send(peer.address, LeaderCheck("x", 1))  # after it, in order
        await until(lambda: len(peer.received) == 2)
        assert [wire(message) for _, message in peer.received] == [wire(publish), wire(LeaderCheck("x", 1))]
        assert failures == []
        await sender.close()
        await peer.stop()

    run(scenario())


def test_an_interrupted_or_stale_chunked_state_never_reaches_the_node() -> None:
    async def scenario() -> None:
        peer = await Peer(max_chunk_size=4096, max_body=1 << 24, current_term=lambda: 2).start()
        publish = full_state(term=2, version=5)
        chunks = list(chunk_frames(wire(publish), 1, 4096, 2, 5))
        async with aiohttp.ClientSession() as session:
            ws, _ = await raw_stream(session, peer, None, protocol="coordinated.v2")
            for chunk in chunks[:-1]:  # all but the last, then the stream ends
                await ws.send_bytes(chunk)
            await ws.close()
            ws, _ = await raw_stream(session, peer, None, protocol="coordinated.v2")
            stale = full_state(term=1, version=7)
            for chunk in chunk_frames(wire(stale), 2, 4096, 1, 7):
                await ws.send_bytes(chunk)
            # Chunks that claim another term than the message they carry.
            for chunk in chunk_frames(wire(publish), 3, 4096, 9, 9):
                await ws.send_bytes(chunk)
            await ws.send_bytes(wire(LeaderCheck("x", 1)))  # the stream still works
            await until(lambda: len(peer.received) == 1)
            assert peer.received == [(SENDER, LeaderCheck("x", 1))]
            for chunk in chunks:  # and the same state whole arrives
                await ws.send_bytes(chunk)
            await until(lambda: len(peer.received) == 2)
            assert wire(peer.received[1][1]) == wire(publish)
            await ws.close()
        await peer.stop()

    run(scenario())


def test_a_peer_that_only_speaks_v1_gets_large_messages_whole() -> None:
    async def scenario() -> None:
        received: list[bytes] = []

        async def stream(request: web.Request) -> web.WebSocketResponse:
            ws = web.WebSocketResponse(protocols=(PROTOCOL_PLAIN,), max_msg_size=1 << 24)
            await ws.prepare(request)
            async for msg in ws:
                if msg.type is WSMsgType.BINARY:
                    received.append(msg.data)
            return ws

        app = web.Application()
        app.router.add_get(STREAM_PATH, stream)
        peer = await Peer().start(app)
        failures: list[tuple[str, Message]] = []
        sender = make_sender(failures)
        sender.max_chunk_size = 4096
        await sender.start()
        publish = full_state(term=2, version=5)
        sender.send(peer.address, publish)
        await until(lambda: len(received) == 1)
        assert not is_chunk(received[0]) and wire(decode_envelope(received[0]).message) == wire(publish)
        await sender.close()
        await peer.stop()

    run(scenario())
