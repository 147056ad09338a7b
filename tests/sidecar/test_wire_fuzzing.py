"""Fuzzing every decoder of outside bytes: the transport envelope (every message type), chunk frames, the
snapshot format and the history lines. Any input is either decoded or refused with the decoder's own error
(which names the problem), never another exception; a decoded envelope goes on to a node of a formed
simulated cluster, which must not fail either.

Inputs are random bytes, random JSON shaped like the real thing (every message tag, values of every JSON
type), and real encodings mutated byte by byte (flips, cuts, insertions, duplications, numbers swapped for
edge values). FUZZ_EXAMPLES sets the examples per decoder (default 150, for `make test`); the long run is

    FUZZ_EXAMPLES=20000 FUZZ_RANDOM=1 .venv/bin/pytest tests/sidecar/test_wire_fuzzing.py -p no:cacheprovider

and prints how many inputs each decoder took and refused (with `-s`).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from coordinated.coordination import messages as m
from coordinated.coordination.counters import LONG_MAX
from coordinated.coordination.requests.keys import KvPut
from coordinated.coordination.state import ClusterState, DiscoveryNode, KeyVersion, Session
from coordinated.sidecar.events.history import last_seq_in, read_events_after, segment_name, summarize_history
from coordinated.sidecar.features.snapshots import SnapshotCorrupt, decode_snapshot, encode_snapshot, snapshot_of
from coordinated.sidecar.peers.chunked import HEADER_BYTES, MAGIC, Complete, Discarded, Reassembler, chunk_frames
from coordinated.simulation.cluster import SimulatedCluster
from coordinated.simulation.node_invariants import check_node_invariants

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not os.environ.get("FUZZ_RANDOM"),
    suppress_health_check=list(HealthCheck),
    database=None,
)
TALLY: Counter[str] = Counter()  # (decoder, outcome) -> inputs, reported at the end of the module
SECRET = b"fuzzing-secret-0123456789abcdef"
EDGE_NUMBERS = [b"0", b"-1", b"1e999", b"-0", b"1.5", str(LONG_MAX).encode(), str(LONG_MAX + 1).encode(), b"9" * 400]
TAGS = sorted(str(t.__struct_config__.tag) for t in m.Message.__args__)  # type: ignore[attr-defined]


@pytest.fixture(scope="module", autouse=True)
def report_totals() -> Iterator[None]:
    yield
    print("\nwire fuzzing, inputs per decoder and outcome:")
    for (decoder, outcome), count in sorted(TALLY.items()):
        print(f"  {decoder:10} {outcome:9} {count}")


# -- inputs --------------------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def mutated(draw: st.DrawFn, samples: list[bytes]) -> bytes:
    """A real encoding with a few byte-level mutations."""
    data = bytearray(draw(st.sampled_from(samples)))
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        op = draw(st.sampled_from(["flip", "cut", "insert", "duplicate", "number", "nest", "truncate"]))
        if op == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "cut":
            del data[at : at + draw(st.integers(1, 16))]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "duplicate":
            data[at:at] = data[at : at + draw(st.integers(1, 64))]
        elif op == "number":  # one of the numbers in the data (or any position, if it holds none)
            numbers = [match.span() for match in re.finditer(rb"\d+", bytes(data))] or [(at, at)]
            start, end = draw(st.sampled_from(numbers))
            data[start:end] = draw(st.sampled_from(EDGE_NUMBERS))
        elif op == "nest":
            depth = draw(st.sampled_from([2, 200, 5000]))
            data[at:at] = b"[" * depth + b"]" * depth * draw(st.integers(0, 1))
        else:
            del data[at:]
    return bytes(data)


def sample_envelopes() -> list[bytes]:
    node = DiscoveryNode("n1", "node-1", "127.0.0.1:9300")
    state = ClusterState(
        "c",
        version=3,
        nodes={"n1": node},
        kv={"a": {"b": [1, 2]}},
        kv_versions={"a": KeyVersion(3, 2)},
        sessions={"s": Session(10_000, None, 2)},
    )
    join = m.Join("n1", "n2", 2, 1, 3)
    return [
        m.encode_envelope(m.Envelope("127.0.0.1:9300", message, request_nonce="ab", receiver="127.0.0.1:9301"))
        for message in (
            m.StartJoinRequest(node, 4, "uuid"),
            m.JoinRequest(node, 1, 2, join, "uuid", True, 1, 3),
            m.PublishRequest(node, 2, 3, state=state),
            m.PublishResponse("n1", 2, 3, True, join),
            m.FollowerCheckResponse("n1", 5, True, 2, 2, 3, 3),
            m.ForwardedRequest("n1", 9, KvPut("key", {"v": 1}, if_version=2), 1000),
            m.PeersResponse(node, node, (node,), 2, "uuid"),
        )
    ]


ENVELOPES = sample_envelopes()


@st.composite
def shaped_envelopes(draw: st.DrawFn) -> bytes:
    """JSON shaped like an envelope, with fields of any type."""
    message = draw(
        st.dictionaries(st.sampled_from(["source", "term", "version", "state", "join", "request"]), json_values)
    )
    message["type"] = draw(st.sampled_from(TAGS))
    envelope = {"sender": draw(json_values), "message": message}
    return msgspec.json.encode(envelope)


# -- the transport envelope, and a node that gets what decodes ----------------------------------------------

CLUSTER: SimulatedCluster | None = None


def formed_cluster() -> SimulatedCluster:
    global CLUSTER
    if CLUSTER is None:
        CLUSTER = SimulatedCluster(11, 3, check_safety=False)
        CLUSTER.stabilise()
    return CLUSTER


def check_envelope(data: bytes) -> None:
    try:
        m.decode_envelope(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        assert str(error), "a refusal names the problem"
        TALLY["envelope", "refused"] += 1
        return
    TALLY["envelope", "decoded"] += 1
    cluster = formed_cluster()
    for node in cluster.nodes:
        assert cluster.deliver_from_wire(node, "fuzzer:9300", data) is None
    cluster.run_for(200)
    for node in cluster.nodes:
        if node.alive:
            check_node_invariants(node.running())


DEEP = b"[" * 5000 + b"]" * 5000


@FUZZ
@given(st.binary(max_size=512) | shaped_envelopes() | mutated(ENVELOPES))
@example(ENVELOPES[5].replace(b'{"v":1}', DEEP))  # found: a RecursionError escaped the decoder
def test_any_bytes_are_an_envelope_or_a_clear_refusal(data: bytes) -> None:
    check_envelope(data)


# -- chunk frames --------------------------------------------------------------------------------------------

CHUNKS = list(chunk_frames(ENVELOPES[2] * 20, 7, 256, 2, 3))


@FUZZ
@given(st.lists(st.binary(max_size=HEADER_BYTES + 64).map(lambda b: MAGIC + b) | mutated(CHUNKS), max_size=12))
def test_any_chunk_frames_are_reassembled_or_discarded(frames: list[bytes]) -> None:
    reassembler = Reassembler(1 << 20, lambda: 2)
    for frame in frames:
        result = reassembler.accept(frame)
        assert result is None or isinstance(result, Complete | Discarded)
        if isinstance(result, Complete):
            check_envelope(bytes(result.body))
        TALLY["chunks", type(result).__name__.lower()] += 1
    reassembler.take_interrupted()
    reassembler.close()


# -- snapshots -----------------------------------------------------------------------------------------------

SNAPSHOT_STATE = ClusterState(
    "c", version=9, kv={"k": 1, "e": "x"}, kv_versions={"k": KeyVersion(4, 2), "e": KeyVersion(9, 9)}
)
SNAPSHOTS = [encode_snapshot(snapshot_of(SNAPSHOT_STATE, "s", 1, 2), secret) for secret in (None, SECRET)]


@FUZZ
@given(st.binary(max_size=512) | mutated(SNAPSHOTS), st.booleans())
def test_any_bytes_are_a_snapshot_or_a_clear_refusal(data: bytes, signed: bool) -> None:
    try:
        decode_snapshot(data, Path("/repo/snap-s.dat"), SECRET if signed else None)
    except SnapshotCorrupt as error:
        assert "/repo/snap-s.dat" in str(error)
        TALLY["snapshot", "refused"] += 1
        return
    TALLY["snapshot", "decoded"] += 1


# -- history lines -------------------------------------------------------------------------------------------

HISTORY_LINES = [
    b'{"type":"term","term":4,"node":"n1","seq":1}\n',
    b'{"type":"accepted","term":4,"version":7,"node":"n1","seq":2}\n',
    b'{"type":"unsafe_bootstrap","marks_term":4,"marks_accepted":[4,7],"node":"n1","seq":3}\n',
]


@FUZZ
@given(st.lists(mutated(HISTORY_LINES) | st.binary(max_size=80), max_size=6))
@example([HISTORY_LINES[0].replace(b'"term":4', b'"term":1e999')])  # found: OverflowError (infinity to int)
@example([HISTORY_LINES[0].replace(b"4", DEEP)])  # found: RecursionError
@example([HISTORY_LINES[2].replace(b'"marks_term":4', b'"marks_term":-1')])  # found: a negative mark was taken
def test_any_history_lines_are_read_or_reported_as_damage(lines: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        history = Path(directory)
        (history / segment_name(1)).write_bytes(b"".join(lines))
        summary = summarize_history(history)
        assert summary.term >= 0
        list(read_events_after(history, 0))
        last_seq_in(history / segment_name(1))
    TALLY["history", "damaged" if summary.damaged else "read"] += 1
