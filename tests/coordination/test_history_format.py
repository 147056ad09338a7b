"""History format 2: what the writer leaves out or folds, a reader gives back exactly (format-1 events)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinated.coordination.history import EventType, HistoryEvent
from coordinated.coordination.history_format import LineEncoder, SegmentExpander, coerce_event, is_format2_start
from coordinated.simulation.chaos import run_random_schedule

NODES = ("n1", "n2", "n3", "n4")
configs = st.lists(st.sampled_from(NODES), max_size=4, unique=True).map(lambda ids: tuple(sorted(ids)))
optional_texts = st.none() | st.sampled_from(["s1", "s2", "caf\u00e9", 'quote"d'])


@st.composite
def history_events(draw: st.DrawFn) -> HistoryEvent:
    kind = draw(st.sampled_from(list(EventType)))
    fields: dict[str, Any] = {}
    if draw(st.booleans()):
        fields["reason"] = draw(st.sampled_from(["abdicated", "loaded at startup", "x\ny"]))
    if kind in (EventType.RETENTION_CUT, EventType.HISTORY_LOST):
        fields.update(marks_term=draw(st.integers(0, 9)), marks_accepted=(draw(st.integers(0, 9)), 4))
        fields["first_kept_seq" if kind is EventType.RETENTION_CUT else "first_lost_seq"] = draw(st.integers(1, 99))
    return HistoryEvent(
        cluster_uuid=draw(st.sampled_from(["_na_", "c1", "c2"])),
        node="n1",
        node_name=draw(st.sampled_from(["pod-1", "pod-1b"])),
        type=kind,
        term=draw(st.integers(0, 2**63 - 1)),
        version=draw(st.none() | st.integers(0, 50)),
        state_uuid=draw(optional_texts),
        parent_uuid=draw(optional_texts),
        master=draw(st.none() | st.sampled_from(NODES)),
        last_committed_config=draw(configs),
        last_accepted_config=draw(configs),
        quorum=draw(st.none() | configs),
        **fields,
    )


def format1(event: HistoryEvent, seq: int, ts: float) -> dict[str, Any]:
    """The event as an earlier release wrote it (after a JSON round trip: lists, not tuples)."""
    decoded: dict[str, Any] = msgspec.json.decode(msgspec.json.encode({**event.to_dict(), "seq": seq, "ts": ts}))
    return decoded


def write_and_read(segments: list[list[tuple[HistoryEvent, bool]]]) -> tuple[list[dict[str, Any]], list[dict]]:
    """Encode segments of (event, folds_commit) and read them back; returns (expected, read)."""
    encoder = LineEncoder()
    expected: list[dict[str, Any]] = []
    read: list[dict[str, Any]] = []
    seq = 0
    for segment in segments:
        encoder.start_segment()
        expander = SegmentExpander()
        for number, (event, folds) in enumerate(segment):
            ts = 1_700_000_000.0 + seq / 1000
            if folds:
                seq += 1
                expected.append(format1(msgspec.structs.replace(event, type=EventType.COMMITTED), seq, ts))
            seq += 1
            expected.append(format1(event, seq, ts))
            line = encoder.encode(event, seq, ts, folds_commit=folds)
            assert line.endswith(b"\n") and b"\n" not in line[:-1]
            assert is_format2_start(line) == (number == 0)
            expanded = expander.expand(line)
            assert expanded.events is not None
            read.extend(expanded.events)
    return expected, read


@pytest.mark.slow  # 300 generated histories: make test runs it, make test-fast does not
@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.tuples(history_events(), st.booleans()), min_size=1, max_size=12), min_size=1, max_size=4))
def test_a_reader_gives_back_exactly_the_format_1_events(segments: list[list[tuple[HistoryEvent, bool]]]) -> None:
    folded = [
        [(msgspec.structs.replace(e, type=EventType.APPLIED) if folds else e, folds) for e, folds in segment]
        for segment in segments
    ]
    expected, read = write_and_read(folded)
    assert read == expected


@pytest.mark.parametrize("seed", [3, 11, 29])
def test_simulated_histories_round_trip_with_their_commits_folded(seed: int) -> None:
    """The simulator's histories (every event type the core records, under faults), written as the node
    writes them: each follower's commit folded into the apply that follows it, segments of 50 lines."""
    report = run_random_schedule(seed, 3 + seed % 3, chaos_ms=5_000)
    assert report.cluster is not None
    folds_seen = 0
    for node in report.cluster.nodes:
        history = node.history
        encoder, expander, read = LineEncoder(), SegmentExpander(), []
        index = lines = 0
        while index < len(history):
            current = history[index]
            event = msgspec.convert({k: v for k, v in current.items() if k not in ("seq", "ts")}, HistoryEvent)
            following = history[index + 1] if index + 1 < len(history) else None
            folds = (
                current["type"] == "committed"
                and current["quorum"] is None
                and following is not None
                and following["type"] == "applied"
                and following["state_uuid"] == current["state_uuid"]
                and following["ts"] == current["ts"]
            )
            if folds:
                assert following is not None
                event = msgspec.structs.replace(event, type=EventType.APPLIED)
                current = following
                folds_seen += 1
            if lines % 50 == 0:
                encoder.start_segment()
                expander = SegmentExpander()
            expanded = expander.expand(encoder.encode(event, current["seq"], current["ts"], folds_commit=folds))
            assert expanded.events is not None
            read.extend(expanded.events)
            lines += 1
            index += 2 if folds else 1
        assert read == msgspec.json.decode(msgspec.json.encode(history))
    assert folds_seen > 0


def test_format_1_lines_pass_through_and_damage_is_named() -> None:
    expander = SegmentExpander()
    line = b'{"cluster_uuid":"c","node":"n","seq":1,"ts":1.0,"type":"term","term":2}\n'
    assert expander.expand(line).events == [msgspec.json.decode(line)]
    assert expander.format == 1
    assert expander.expand(b"[1, 2]\n").events is None
    assert expander.expand(b"{cut\n").events is None


def test_a_field_no_earlier_line_set_stays_missing() -> None:
    # A format-2 segment whose first line lost a field cannot fill it in: the audit's schema names the line.
    expander = SegmentExpander()
    expander.expand(b'{"format":2,"node":"n","seq":1,"ts":1.0,"type":"term","term":2}\n')
    (event,) = expander.expand(b'{"node":"n","seq":2,"ts":1.0,"type":"term","term":2}\n').events or []
    assert "cluster_uuid" not in event


def test_coerce_event_fills_in_what_a_tool_leaves_out() -> None:
    event = coerce_event({"type": "term", "term": 3, "node": "n", "seq": 9})
    assert (event.type, event.term, event.node_name, event.cluster_uuid) == (EventType.TERM, 3, "n", "_na_")
