"""The refactoring proof: the simulator's histories for fixed seeds, reduced to one sha256 per seed.

A change that claims to keep behaviour (a split, a rename) must leave every digest as it was. Regenerate
the golden file only for a change that means to alter behaviour, and say in the commit why:

    python tests/coordination/history_digests.py --write            # rewrite golden_history_digests.txt
    python tests/coordination/history_digests.py --dump DIR         # also write each seed's JSONL into DIR
    python tests/coordination/history_digests.py --check            # compare, print the seeds that differ
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from coordinated.simulation.chaos import run_random_schedule

GOLDEN = Path(__file__).with_name("golden_history_digests.txt")
SEEDS = range(1, 201)
CHAOS_MS = 10_000


def nodes_for(seed: int) -> int:
    return 3 + seed % 5  # 3 to 7 nodes, every size 40 times


def history_lines(seed: int) -> list[str]:
    """Every node's history, one JSON line per event, nodes in order: exactly what `--histories` writes."""
    report = run_random_schedule(seed, nodes_for(seed), chaos_ms=CHAOS_MS)
    assert report.cluster is not None
    return [
        f"{node.name} {json.dumps(event, sort_keys=True)}" for node in report.cluster.nodes for event in node.history
    ]


def digest(lines: list[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def read_golden() -> dict[int, str]:
    golden = {}
    for line in GOLDEN.read_text().splitlines():
        seed, nodes, value = line.split()
        golden[int(seed)] = value
        assert int(nodes) == nodes_for(int(seed))
    return golden


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="rewrite the golden digests")
    parser.add_argument("--check", action="store_true", help="compare with the golden digests")
    parser.add_argument("--dump", type=Path, help="write each seed's histories into this folder")
    args = parser.parse_args(argv)
    golden = read_golden() if args.check else {}
    rows, differ = [], []
    for seed in SEEDS:
        lines = history_lines(seed)
        value = digest(lines)
        rows.append(f"{seed} {nodes_for(seed)} {value}")
        if args.dump:
            args.dump.mkdir(parents=True, exist_ok=True)
            (args.dump / f"seed-{seed}.jsonl").write_text("\n".join(lines) + "\n")
        if args.check and golden.get(seed) != value:
            differ.append(seed)
    if args.write:
        GOLDEN.write_text("\n".join(rows) + "\n")
    if args.check:
        print(f"{len(SEEDS) - len(differ)} of {len(SEEDS)} seeds give the golden histories; differ: {differ}")
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
