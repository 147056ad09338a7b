"""Options shared by the whole suite."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("simulation")
    group.addoption(
        "--sim-seed",
        type=int,
        default=None,
        help="replay one random simulation schedule: the seed printed by a failing property test",
    )
    group.addoption(
        "--sim-nodes",
        type=int,
        default=None,
        help="with --sim-seed: the node count printed with the seed",
    )
