"""What the master answers without a publication is linearizable:

- a write that changes nothing (the delete of a missing key, a prefix with no key under it, a conditional
  write that fails) is answered from the master's state, so it waits for the master to confirm with a quorum
  that it still leads, as a read does: a master that was replaced meanwhile would answer from a state the new
  master has moved past;
- a read on the master starts only once the master has applied every state it committed: a follower applies a
  committed state before the master does, and a read served there (after a read barrier) may already show it.
"""

from __future__ import annotations

from coordinated.coordination.client import ClientRequest, ClientResult, Committed, ReadValue
from coordinated.coordination.context import Mode
from coordinated.coordination.followers_checker import FOLLOWER_CHECK_INTERVAL, FOLLOWER_CHECK_TIMEOUT
from coordinated.coordination.leader_checker import LEADER_CHECK_INTERVAL, LEADER_CHECK_TIMEOUT
from coordinated.coordination.requests.keys import KvDelete, KvDeletePrefix, KvGet, KvPut
from coordinated.simulation.cluster import SIM_SETTINGS, SimulatedCluster
from coordinated.simulation.network import Link


def results_of(cluster: SimulatedCluster, node: int, request: ClientRequest, wait_ms: int) -> list[ClientResult]:
    results: list[ClientResult] = []
    cluster.submit(node, request, on_done=results.append)
    cluster.run_for(wait_ms)
    return results


def test_a_replaced_master_does_not_acknowledge_a_write_that_changed_nothing() -> None:
    # The followers notice a silent master within a second; the master's own checks of its followers take a
    # minute, so the cut-off master stays master, idle, long after it was replaced (as a paused one would).
    settings = SIM_SETTINGS.with_values(
        {
            LEADER_CHECK_INTERVAL: 200,
            LEADER_CHECK_TIMEOUT: 300,
            FOLLOWER_CHECK_INTERVAL: 60_000,
            FOLLOWER_CHECK_TIMEOUT: 60_000,
        }
    )
    cluster = SimulatedCluster(3, 3, settings=settings)
    cluster.run_for(5_000)
    old = cluster.leader()
    assert old is not None
    cluster.network.isolate(old.address, cluster.addresses(), Link.BLACKHOLE)
    cluster.run_for(10_000)
    new = next(node for node in cluster.nodes if node is not old and node.running().mode is Mode.LEADER)
    assert old.running().mode is Mode.LEADER and old.running().publication is None  # replaced, and unaware
    written = results_of(cluster, new.index, KvPut("k/1", "x"), 2_000)
    assert isinstance(written[0], Committed), written
    # On the old master's state `k/1` does not exist: it must not answer that the delete took effect (a read
    # after it, through the new master, would still find the key).
    for request in (KvDelete("k/1"), KvDeletePrefix("k/")):
        answers = results_of(cluster, old.index, request, 1_000)
        assert not any(isinstance(answer, Committed) for answer in answers), (request, answers)


def test_a_read_on_the_master_shows_a_state_a_follower_applied_before_it() -> None:
    cluster = SimulatedCluster(5, 3)
    cluster.stabilise()
    master = cluster.leader()
    assert master is not None
    follower = next(node for node in cluster.nodes if node is not master)
    for node in cluster.nodes:
        if node is not master:  # the followers' answers to the master are slow: it applies last, late
            cluster.network._slow[(node.address, master.address)] = 500
    cluster.submit(master.index, KvPut("k", "new"))
    assert cluster.run_until(lambda: follower.running().applied_state.kv.get("k") == "new", 5_000, step=1)
    assert "k" not in master.running().applied_state.kv  # the window: committed, shown by a follower
    answers = results_of(cluster, master.index, KvGet("k"), 3_000)
    assert isinstance(answers[0], ReadValue) and answers[0].value == "new", answers


def test_a_follower_that_answers_after_the_publication_completed_gets_its_commit_at_once() -> None:
    """The master applies once a quorum has: a slower follower's answer then finds the publication over. It is
    sent the commit when its answer arrives, not at the next follower check a second later (its watchers would
    wait that long)."""
    cluster = SimulatedCluster(5, 3)
    cluster.stabilise()
    master = cluster.leader()
    assert master is not None
    slow = next(node for node in cluster.nodes if node is not master)
    cluster.network._slow[(slow.address, master.address)] = 200  # its answers to the master take 200 ms more
    written = results_of(cluster, master.index, KvPut("k", "v"), 100)
    assert isinstance(written[0], Committed), written  # committed and applied without the slow follower
    assert slow.running().applied_state.version < written[0].version
    cluster.run_for(300)  # its answer arrives after ~200 ms; the commit follows within a hop
    assert slow.running().applied_state.version >= written[0].version
