"""Work a write costs in proportion to what it changes, counted (not timed): a write of one key leaves the
state's other maps as the very objects they were, and no node compares whole maps for it.

Readers of the state skip work on `before.x is after.x` (the session pass of every commit, for one); a batch
that hands back a new but equal map for each field it did not change makes every such reader do its work, and
the pass then compares every key of the state, on every write.
"""

from __future__ import annotations

import pytest

from coordinated.coordination import state as state_module
from coordinated.coordination.client import Committed
from coordinated.coordination.requests.keys import KvPut
from coordinated.simulation.cluster import SimulatedCluster

from .harness import leader


def test_a_write_of_one_key_keeps_the_other_maps_of_the_state_it_derives_from() -> None:
    node = leader()
    before = node.coordinator.last_accepted_state
    result = node.results[node.submit(KvPut("k", 1))]
    assert isinstance(result, Committed), result
    after = node.coordinator.last_accepted_state
    assert after.version > before.version and after.kv is not before.kv
    assert after.sessions is before.sessions
    assert after.kv_sessions is before.kv_sessions
    assert after.persistent_settings is before.persistent_settings


def test_no_node_compares_whole_maps_for_a_write(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = SimulatedCluster(3, 3)
    cluster.stabilise()
    master = cluster.leader()
    assert master is not None
    for i in range(5):  # states the nodes derived before the count starts
        cluster.submit(master.index, KvPut(f"warm/{i}", i))
        cluster.run_for(500)
    full_comparisons = 0
    compare = state_module.diff_maps

    def counted(before: object, after: object) -> object:
        nonlocal full_comparisons
        full_comparisons += 1
        return compare(before, after)  # type: ignore[arg-type]

    monkeypatch.setattr(state_module, "diff_maps", counted)
    results: list[object] = []
    for i in range(20):
        cluster.submit(master.index, KvPut(f"k/{i}", i), on_done=results.append)
        cluster.run_for(500)
    assert len(results) == 20 and all(isinstance(result, Committed) for result in results), results
    assert full_comparisons == 0
