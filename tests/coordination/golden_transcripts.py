"""The refactoring proof: the simulator's histories for fixed seeds, as readable transcripts in testdata/golden/.

A change that claims to keep behaviour (a split, a rename) must leave every transcript as it is. Each shows
one seed's run: its faults and clients, then every node's history in time order, condensed (term bumps with
nothing between them in one line; the states a node accepted, committed and applied under one master in one
term in one line, with their version ranges and the voting configuration). When one differs, the diff says
which node, when and what. Regenerate only for a change that means to alter behaviour, and say in the commit
why (`test_history_equivalence.py` with `--rewrite` or REWRITE=1, or `python tests/coordination/golden_transcripts.py
--write`).

The uuids, quorum and parent fields of the events are left out: they follow from what is shown.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from coordinated.programs import run_program
from coordinated.simulation.chaos import run_random_schedule

GOLDEN = Path(__file__).with_name("testdata") / "golden"
SEEDS = range(1, 201)
CHAOS_MS = 10_000
VERSION_EVENTS = ("accepted", "committed", "applied")


def nodes_for(seed: int) -> int:
    return 3 + seed % 5  # 3 to 7 nodes, every size 40 times


def golden_file(seed: int) -> Path:
    return GOLDEN / f"seed-{seed:03d}.txt"


def short(node_id: str | None) -> str:
    """node2-a6cecc1b -> node2 (a node that lost its disk comes back under its name with a new id)."""
    return "none" if node_id is None else node_id.rsplit("-", 1)[0]


def names(config: Iterable[str]) -> str:
    return ",".join(short(node) for node in config)


@dataclass
class _Run:
    """Consecutive version events of one node under one master in one term."""

    ts: float
    node: str
    term: int
    master: str
    config: str
    versions: dict[str, list[int]] = field(default_factory=lambda: {kind: [] for kind in VERSION_EVENTS})

    def line(self, config_changed: bool) -> str:
        parts = [f"{kind} {version_range(versions)}" for kind, versions in self.versions.items() if versions]
        config = f" config {self.config}" if config_changed else ""
        return f"{self.ts:8.3f} {self.node} term {self.term} under {self.master}: {', '.join(parts)}{config}"


def version_range(versions: list[int]) -> str:
    """v3-59, with the count when some versions in between are missing: v4-59 (53)."""
    low, high = min(versions), max(versions)
    text = f"v{low}" if low == high else f"v{low}-{high}"
    return text if len(versions) == high - low + 1 else f"{text} ({len(versions)})"


class _NodeLines:
    """One node's history condensed: (ts, line) pairs in the node's order."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.run: _Run | None = None
        self.terms: list[dict[str, Any]] = []
        self.config = ""  # the voting configuration last shown for this node

    def config_changed(self, config: str) -> bool:
        changed, self.config = config != self.config, config
        return changed

    def flush_run(self) -> Iterator[tuple[float, str]]:
        if self.run is not None:
            yield self.run.ts, self.run.line(self.config_changed(self.run.config))
            self.run = None

    def flush_terms(self) -> Iterator[tuple[float, str]]:
        if self.terms:
            first, last = self.terms[0], self.terms[-1]
            span = f"term {first['term']}" if len(self.terms) == 1 else f"terms {first['term']}-{last['term']}"
            yield first["ts"], f"{first['ts']:8.3f} {self.node} {span}"
            self.terms = []

    def read(self, events: list[dict[str, Any]]) -> Iterator[tuple[float, str]]:
        for event in events:
            kind = event["type"]
            if kind == "term":
                yield from self.flush_run()
                self.terms.append(event)
                continue
            yield from self.flush_terms()
            if kind in VERSION_EVENTS:
                key = (event["term"], short(event["master"]), names(event["last_committed_config"]))
                if self.run is None or (self.run.term, self.run.master, self.run.config) != key:
                    yield from self.flush_run()
                    self.run = _Run(event["ts"], self.node, *key)
                self.run.versions[kind].append(event["version"])
            else:
                yield from self.flush_run()
                detail = f" ({event['reason']})" if "reason" in event else ""
                what = f"{kind.replace('_', ' ')} in term {event['term']}{detail}"
                config = names(event["last_committed_config"])
                shown = f" config {config}" if self.config_changed(config) else ""
                yield event["ts"], f"{event['ts']:8.3f} {self.node} {what}{shown}"
        yield from self.flush_run()
        yield from self.flush_terms()


def transcript_of(seed: int, histories: dict[str, list[dict[str, Any]]], summary: list[str]) -> list[str]:
    header = [
        f"# seed {seed}: {nodes_for(seed)} nodes, {CHAOS_MS} ms of random faults (tests/coordination/golden_transcripts.py)",
        *summary,
    ]
    lines = [entry for node, events in histories.items() for entry in _NodeLines(node).read(events)]
    counts = [f"{node}: {len(events)} events" for node, events in histories.items()]
    return header + [text for _, text in sorted(lines, key=lambda entry: entry[0])] + counts


def transcript(seed: int) -> list[str]:
    """Run the seed's schedule and describe it."""
    report = run_random_schedule(seed, nodes_for(seed), chaos_ms=CHAOS_MS)
    assert report.cluster is not None
    faults = ", ".join(f"{name} {count}" for name, count in sorted(report.faults.items())) or "none"
    summary = [
        f"run: {report.steps} steps, {report.virtual_ms} virtual ms, {report.operations} operations, "
        f"{report.acknowledged_writes} acknowledged writes",
        f"faults: {faults}",
    ]
    histories = {node.name: list(node.history) for node in report.cluster.nodes}
    return transcript_of(seed, histories, summary)


def read_golden(seed: int) -> list[str]:
    return golden_file(seed).read_text().splitlines()


def write_golden(seed: int, lines: list[str]) -> None:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    golden_file(seed).write_text("\n".join(lines) + "\n")


@click.command(help=__doc__)
@click.option("--write", is_flag=True, help="rewrite the golden transcripts")
def compare(write: bool) -> int:
    differ = []
    for seed in SEEDS:
        lines = transcript(seed)
        if write:
            write_golden(seed, lines)
        elif not golden_file(seed).exists() or read_golden(seed) != lines:
            differ.append(seed)
    print(f"{len(SEEDS) - len(differ)} of {len(SEEDS)} seeds give the golden transcripts; differ: {differ}")
    return 1 if differ else 0


def main(argv: list[str]) -> int:
    return run_program(compare, argv, "python tests/coordination/golden_transcripts.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
