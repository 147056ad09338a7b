"""Access control under random faults in the simulator (simulation/access_changes.py): an admin grants and
revokes a principal's role through any node while the principal writes through any node and the nemesis
partitions, crashes and restarts nodes. No write is acknowledged outside the principal's grant (a write racing a
revocation is acknowledged before it or refused), and a change acknowledged has been applied by every node."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinated.simulation.access_changes import run_access_schedule


@pytest.mark.parametrize(("seed", "nodes"), [(1, 3), (8, 5), (21, 3), (34, 4)])
def test_writes_racing_grants_and_revocations_under_faults(seed: int, nodes: int) -> None:
    report = run_access_schedule(seed, nodes)
    assert report.grants >= 3 and report.revocations >= 3, report
    assert report.writes_acknowledged > 20 and report.writes_refused > 20, report
    assert report.acknowledged_changes > 3, report


@pytest.mark.slow
@settings(
    max_examples=20,
    deadline=None,
    derandomize=not os.environ.get("SIM_RANDOM"),
    suppress_health_check=list(HealthCheck),
)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1), nodes=st.integers(min_value=3, max_value=5))
def test_random_access_schedules(seed: int, nodes: int) -> None:
    run_access_schedule(seed, nodes)
