"""The synthetic history generator (no Spark): it must produce the situations the audit has to handle."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

from coordinated.audit.synth import SynthConfig, generate, write_history


def test_generated_history_has_the_interesting_situations() -> None:
    hb = generate(SynthConfig(events=20_000, seed=3))
    events = hb.events()
    assert len(events) == sum(hb.seq.values()) >= 20_000
    by_node: dict[str, list[int]] = defaultdict(list)
    for e in events:
        by_node[str(e["node"])].append(int(e["seq"]))  # type: ignore[call-overload]
    assert all(seqs == list(range(1, len(seqs) + 1)) for seqs in by_node.values())
    assert hb.restarts, "some node restarts"
    types = Counter(e["type"] for e in events)
    assert types["elected"] > 20 and types["stepped_down"] > 0
    assert len({e["master"] for e in events if e["type"] == "committed"}) == 5, "masters change"
    # Before bootstrap: "_na_" events, among them the first election.
    assert any(e["cluster_uuid"] == "_na_" and e["type"] == "elected" for e in events)
    # Uncommitted intermediate states that a later committed state descends from.
    committed = {e["state_uuid"] for e in events if e["type"] == "committed"}
    parents = {e["state_uuid"]: e["parent_uuid"] for e in events if e["type"] == "accepted"}
    through = [s for s in committed if parents.get(s) not in committed and parents.get(s) is not None]
    assert len(through) > 5
    # The lagging node applies fewer states than the others, skipping versions.
    applied = Counter(e["node"] for e in events if e["type"] == "applied")
    assert applied["node-4"] < 0.5 * applied["node-1"]


def test_write_history_streams_segments_and_rotates_on_restart(tmp_path: Path) -> None:
    n = write_history(SynthConfig(events=3000, seed=1, p_restart=0.9), tmp_path, segment_events=400)
    files = sorted(tmp_path.rglob("*.jsonl"))
    lines = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert len(lines) == n
    per_node = Counter(f.parent.name for f in files)
    assert max(per_node.values()) > 3
    assert all(len(f.read_text().splitlines()) <= 400 for f in files)


def test_generation_is_deterministic() -> None:
    a = generate(SynthConfig(events=2000, seed=9))
    b = generate(SynthConfig(events=2000, seed=9))
    c = generate(SynthConfig(events=2000, seed=10))
    assert a.lines == b.lines and a.lines != c.lines
