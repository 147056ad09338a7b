"""Behaviour-preserving changes keep the simulator's histories: each golden seed's run is compared line by line
with its transcript in testdata/golden/ (see golden_transcripts.py). With --rewrite or REWRITE=1 the
transcripts are written from what the simulator does now: review the diff before committing it."""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from golden_transcripts import SEEDS, golden_file, nodes_for, read_golden, transcript, write_golden


def check_seed(seed: int, rewrite: bool) -> None:
    lines = transcript(seed)
    if rewrite:
        write_golden(seed, lines)
        return
    assert golden_file(seed).exists(), f"{golden_file(seed)} is missing: write it with --rewrite"
    expected = read_golden(seed)
    if lines != expected:
        diff = difflib.unified_diff(expected, lines, str(golden_file(seed)), "the simulator now", lineterm="", n=2)
        pytest.fail(f"seed {seed} ({nodes_for(seed)} nodes) changed its history:\n" + "\n".join(list(diff)[:80]))


@pytest.mark.parametrize("seed", list(SEEDS)[:20])
def test_first_seeds_give_the_golden_histories(seed: int, rewrite: bool) -> None:
    check_seed(seed, rewrite)


@pytest.mark.slow
@pytest.mark.parametrize("seed", list(SEEDS)[20:])
def test_all_seeds_give_the_golden_histories(seed: int, rewrite: bool) -> None:
    check_seed(seed, rewrite)


def test_every_golden_transcript_belongs_to_a_seed() -> None:
    """A transcript left behind by a smaller seed range would never be checked again."""
    assert sorted(path.name for path in golden_file(1).parent.glob("*.txt")) == [golden_file(s).name for s in SEEDS]
