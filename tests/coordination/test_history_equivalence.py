"""Behaviour-preserving changes keep the simulator's histories byte for byte (see history_digests.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from history_digests import SEEDS, digest, history_lines, nodes_for, read_golden

GOLDEN = read_golden()


@pytest.mark.parametrize("seed", list(SEEDS)[:20])
def test_first_seeds_give_the_golden_histories(seed: int) -> None:
    assert digest(history_lines(seed)) == GOLDEN[seed], f"seed {seed} ({nodes_for(seed)} nodes) changed its history"


@pytest.mark.slow
@pytest.mark.parametrize("seed", list(SEEDS)[20:])
def test_all_seeds_give_the_golden_histories(seed: int) -> None:
    assert digest(history_lines(seed)) == GOLDEN[seed], f"seed {seed} ({nodes_for(seed)} nodes) changed its history"
