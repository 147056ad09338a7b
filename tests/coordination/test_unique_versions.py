"""Every acknowledged write gets its own version, in the simulator: concurrent writes of one key through every
node, and random schedules of clients that write two hot keys and compare-and-set on the versions their own
writes returned, with and without faults. Two checks judge them: the linearizability checker, whose model has a
version name one write (and a compare-and-set on it mean "nothing written since"), and the committed states
themselves (`hot_key_clients.VersionWitness`). Both must catch the old batching rule, which stamped every write
of a batch with the batch's version even when two of them wrote one key.

A failure prints the seed; replay it with `run_random_schedule(seed, nodes, hot_writers=...)`.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinated.coordination.batch_writes import WriteClaims
from coordinated.coordination.client import ClusterError, Committed, version_conflict_error
from coordinated.coordination.requests.keys import KvPut
from coordinated.simulation import hot_key_clients
from coordinated.simulation.chaos import RunReport, run_random_schedule
from coordinated.simulation.cluster import SafetyViolation, SimulatedCluster
from coordinated.simulation.hot_key_clients import HotWriter, VersionWitness
from coordinated.simulation.linearizability import check_history
from coordinated.simulation.recorder import refused_at

EXAMPLES = int(os.environ.get("SIM_EXAMPLES", "200"))
HOT_WRITERS = 6


@pytest.fixture
def old_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """The batching before one write per key per batch: no task ever waits."""
    monkeypatch.setattr(WriteClaims, "must_wait", lambda self, writes: False)


def concurrent_writes(seed: int, nodes: int, writes: int) -> tuple[list[Committed], list[str]]:
    """`writes` puts of one key submitted at one instant through every node of a settled cluster; their answers
    and what the committed states say of the versions they got."""
    cluster = SimulatedCluster(seed, nodes)
    cluster.stabilise()
    witness = VersionWitness(cluster, keys=("k",))
    writer = HotWriter(cluster, 0, cluster.rng)  # only to hold what was acknowledged, for the witness
    results: dict[int, object] = {}
    for index in range(writes):

        def done(result: object, index: int = index) -> None:
            results[index] = result
            if isinstance(result, Committed):
                writer.acknowledged.append(("k", result.version, f"w{index}"))

        cluster.submit(index % nodes, KvPut("k", f"w{index}"), client=index, on_done=done)
    assert cluster.run_until(lambda: len(results) == writes, timeout=60_000)
    committed = [result for result in results.values() if isinstance(result, Committed)]
    assert len(committed) == writes, results
    return committed, witness.problems([writer])


@settings(max_examples=20, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), nodes=st.integers(3, 5), writes=st.integers(2, 40))
def test_n_concurrent_writes_of_one_key_get_n_distinct_versions(seed: int, nodes: int, writes: int) -> None:
    committed, problems = concurrent_writes(seed, nodes, writes)
    assert len({result.version for result in committed}) == writes
    assert not problems


def test_the_old_rule_gave_concurrent_writes_of_one_key_one_version(old_rule: None) -> None:
    committed, problems = concurrent_writes(1, 3, 24)
    assert len({result.version for result in committed}) < 24
    assert any("acknowledged puts got version" in problem for problem in problems), problems


def hot_run(seed: int, nodes: int, faults: bool) -> RunReport:
    try:
        report = run_random_schedule(seed, nodes, hot_writers=HOT_WRITERS, nemesis=faults, chaos_ms=10_000)
    except AssertionError as error:
        raise AssertionError(f"{error}\nreplay: seed {seed}, {nodes} nodes, faults {faults}") from error
    assert report.linearizability is not None
    assert report.linearizability.ok, f"{report.linearizability.detail}\nreplay: seed {seed}, {nodes} nodes"
    return report


@pytest.mark.parametrize("faults", [True, False])
@pytest.mark.parametrize(("seed", "nodes"), [(1, 3), (2, 5), (3, 4), (4, 4), (5, 7)])
def test_hot_writers_with_compare_and_set_on_their_own_versions_are_linearizable(
    seed: int, nodes: int, faults: bool
) -> None:
    report = hot_run(seed, nodes, faults)
    assert report.own_cas_succeeded > 0 and (sum(report.faults.values()) > 0) is faults


@pytest.mark.slow
@settings(
    max_examples=max(1, EXAMPLES // 8),
    deadline=None,
    derandomize=not os.environ.get("SIM_RANDOM"),
    suppress_health_check=list(HealthCheck),
)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1), nodes=st.integers(min_value=3, max_value=7))
def test_random_schedules_of_hot_writers_are_linearizable(seed: int, nodes: int) -> None:
    hot_run(seed, nodes, faults=True)


@pytest.mark.parametrize("faults", [True, False])
def test_the_committed_states_catch_the_old_rule(old_rule: None, faults: bool) -> None:
    with pytest.raises(SafetyViolation, match="a version names more than one write"):
        run_random_schedule(1, 3, hot_writers=HOT_WRITERS, nemesis=faults, chaos_ms=10_000)


@pytest.mark.parametrize("faults", [True, False])
def test_the_linearizability_model_catches_the_old_rule(
    old_rule: None, faults: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hot_key_clients.VersionWitness, "problems", lambda self, writers: [])
    report = run_random_schedule(1, 3, hot_writers=HOT_WRITERS, nemesis=faults, chaos_ms=10_000)
    assert report.linearizability is not None and not report.linearizability.ok
    assert report.cluster is not None
    assert not check_history(report.cluster.operations).ok


def test_a_refusal_names_the_version_it_found() -> None:
    """The recorder reads the version a 409 found from its reason, as `version_conflict_error` words it."""
    assert refused_at(version_conflict_error("k", 3, 4)) == 4
    assert refused_at(version_conflict_error("k", 3, 0)) == 0
    assert refused_at(version_conflict_error("k", 0, 7)) == 7
    assert refused_at(ClusterError("x", "current version [3]", 503)) is None
