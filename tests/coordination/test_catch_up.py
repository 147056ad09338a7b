"""Catch-up by diffs on the simulator: a node that lagged or restarted gets the changes it missed from the
master's recent diffs while the master still has them, and the full state when it must."""

from __future__ import annotations

from test_scenarios import SECOND, formed, leader_of, request

from coordinated.coordination.client import Committed
from coordinated.coordination.coordinator import Mode
from coordinated.coordination.diff_history import DIFF_HISTORY_MAX_DIFFS
from coordinated.coordination.messages import Message, PublishRequest, PublishResponse
from coordinated.coordination.requests.keys import KvPut
from coordinated.coordination.state import ClusterState, ClusterStateDiff
from coordinated.simulation.chaos import run_random_schedule
from coordinated.simulation.cluster import SIM_SETTINGS, SimNode, SimulatedCluster
from coordinated.simulation.network import Link


def _publications_to(cluster: SimulatedCluster, node: SimNode) -> list[PublishRequest]:
    seen: list[PublishRequest] = []

    def tap(sender: str, destination: str, message: Message) -> None:
        if destination == node.address and isinstance(message, PublishRequest):
            seen.append(message)

    cluster.tap = tap
    return seen


def _write(cluster: SimulatedCluster, node: int, count: int, prefix: str = "k") -> None:
    for key in range(count):
        assert isinstance(request(cluster, node, KvPut(f"{prefix}{key}", key)), Committed)


def _down_while_writing(cluster: SimulatedCluster, writes: int) -> tuple[SimNode, SimNode]:
    """Crash a follower, let the master remove it, write, and return (leader, the crashed follower)."""
    leader = leader_of(cluster)
    follower = next(node for node in cluster.nodes if node is not leader)
    cluster.crash(follower.index)
    cluster.close_connection(leader.index, follower.address)  # the master removes it at once
    assert cluster.run_until(lambda: follower.node.id not in leader.running().applied_state.nodes, 10 * SECOND)
    _write(cluster, leader.index, writes, prefix="missed")
    return leader, follower


def _follower_missing_three_writes(written_before: int) -> tuple[SimulatedCluster, SimNode, SimNode]:
    """A formed cluster in which one follower missed three writes: the master's messages to it are lost (one
    way) until the caller heals the network."""
    cluster = formed(3)
    _write(cluster, 0, written_before)
    leader = leader_of(cluster)
    follower = next(node for node in cluster.nodes if node is not leader)
    cluster.network.set_link(leader.address, follower.address, Link.BLACKHOLE, both_ways=False)
    _write(cluster, leader.index, 3, prefix="missed")
    return cluster, leader, follower


def _caught_up(leader: SimNode, follower: SimNode) -> bool:
    return (
        follower.alive
        and follower.running().mode is Mode.FOLLOWER
        and follower.running().applied_state.state_uuid == leader.running().applied_state.state_uuid
    )


def test_a_restarted_node_gets_the_writes_it_missed_as_one_diff() -> None:
    cluster = formed(3)
    _write(cluster, 0, 30)
    leader, follower = _down_while_writing(cluster, 40)
    seen = _publications_to(cluster, follower)
    cluster.start_node(follower.index)
    assert cluster.run_until(lambda: _caught_up(leader, follower), 30 * SECOND)
    assert seen and all(message.state is None and message.diff is not None for message in seen)
    assert dict(follower.running().applied_state.kv) == dict(leader.running().applied_state.kv)
    assert leader.running().catch_up.diffs_sent >= 1


def test_a_node_behind_the_retained_diffs_gets_the_full_state() -> None:
    short = SIM_SETTINGS.with_values({DIFF_HISTORY_MAX_DIFFS: 5})
    cluster = formed(3, settings=short)
    _write(cluster, 0, 30)
    leader, follower = _down_while_writing(cluster, 10)
    seen = _publications_to(cluster, follower)
    cluster.start_node(follower.index)
    assert cluster.run_until(lambda: _caught_up(leader, follower), 30 * SECOND)
    assert seen and seen[0].state is not None, "the master no longer holds the diffs it missed"
    assert dict(follower.running().applied_state.kv) == dict(leader.running().applied_state.kv)


def test_a_catch_up_diff_the_node_cannot_apply_is_followed_by_the_full_state() -> None:
    """As Elasticsearch's PublicationTransportHandler: a diff that does not apply to what the node holds makes
    it ask for the full state. Here the master is told the node holds an older state than it does."""
    cluster = formed(3)
    _write(cluster, 0, 10)
    leader, follower = _down_while_writing(cluster, 10)
    held = follower.persisted.last_accepted_state
    seen = _publications_to(cluster, follower)
    responses: list[PublishResponse] = []
    tap = cluster.tap
    assert tap is not None

    def also_responses(sender: str, destination: str, message: Message) -> None:
        tap(sender, destination, message)
        if sender == follower.name and isinstance(message, PublishResponse):
            responses.append(message)

    cluster.tap = also_responses
    history = leader.running().catch_up.history
    diff_since = history.diff_since

    def from_an_older_state(term: int, version: int, current: ClusterState) -> ClusterStateDiff | None:
        return diff_since(term, version - 3, current)

    history.diff_since = from_an_older_state  # type: ignore[method-assign]
    cluster.start_node(follower.index)
    assert cluster.run_until(lambda: _caught_up(leader, follower), 30 * SECOND)
    assert seen and seen[0].diff is not None and seen[0].diff.base_uuid != held.state_uuid
    assert any(response.need_full_state for response in responses)
    assert any(message.state is not None for message in seen)
    assert dict(follower.running().applied_state.kv) == dict(leader.running().applied_state.kv)


def test_a_follower_that_missed_publications_is_caught_up_by_diff_on_its_next_check() -> None:
    cluster, leader, follower = _follower_missing_three_writes(written_before=20)
    seen = _publications_to(cluster, follower)
    cluster.network.heal()
    assert cluster.run_until(lambda: _caught_up(leader, follower), 10 * SECOND)
    assert seen and all(message.state is None for message in seen)
    assert dict(follower.running().applied_state.kv) == dict(leader.running().applied_state.kv)


def test_random_fault_schedules_exercise_catch_up_by_diff_and_stay_safe() -> None:
    """The random schedules (crashes, restarts, disk rollbacks, partitions) reach the catch-up by diff; every
    safety and linearizability check of `run_random_schedule` holds around it."""
    sent = 0
    for seed in (7, 17):  # two seeds whose schedules reach it (a change of timing may need others)
        report = run_random_schedule(seed, 3 + seed % 3, counters=2)
        assert report.linearizability is not None and report.linearizability.ok
        assert report.cluster is not None
        sent += sum(node.coordinator.catch_up.diffs_sent for node in report.cluster.nodes if node.coordinator)
    assert sent > 0


def test_a_follower_that_missed_a_reconfiguration_is_caught_up_with_the_state_as_published() -> None:
    """A commit marks the master's copy of a reconfiguration state (its last-committed configuration becomes
    the new one) under the same state UUID. A follower that missed the publication must be sent the state as
    it was published, not the master's marked copy: one state UUID names one content on every node, which
    the simulator's safety checks and the audit's unique-state-per-version hold every history to."""
    cluster = formed(3)
    leader = leader_of(cluster)
    lagging = next(node for node in cluster.nodes if node is not leader)
    cluster.add_node()
    assert cluster.run_until(lambda: len(leader.running().applied_state.nodes) == 4, 10 * SECOND)
    cluster.stabilise(5 * SECOND)
    assert len(leader.running().applied_state.last_committed_config) == 3
    cluster.network.set_link(leader.address, lagging.address, Link.BLACKHOLE, both_ways=False)
    seen = _publications_to(cluster, lagging)
    cluster.add_node()  # five master-eligible nodes: the master reconfigures from three voters to five
    assert cluster.run_until(lambda: len(leader.running().applied_state.last_committed_config) == 5, 10 * SECOND)
    cluster.network.heal()
    assert cluster.run_until(lambda: _caught_up(leader, lagging), 10 * SECOND)
    caught_up_with = [message for message in seen if message.state is not None or message.diff is not None]
    assert caught_up_with, "the lagging follower was never sent what it missed"
    accepted = lagging.running().applied_state
    assert accepted.last_committed_config == leader.running().applied_state.last_committed_config


def test_a_follower_that_cannot_apply_a_catch_up_diff_gets_the_full_state_at_once() -> None:
    """Outside a publication too: the follower's `need_full_state` answer to a catch-up diff is met with the full
    state, not with the same diff at every follower check until the lag detector removes the node."""
    cluster, leader, follower = _follower_missing_three_writes(written_before=10)
    history = leader.running().catch_up.history
    diff_since = history.diff_since

    def from_an_older_state(term: int, version: int, current: ClusterState) -> ClusterStateDiff | None:
        return diff_since(term, version - 1, current)  # based on a state the follower does not hold

    history.diff_since = from_an_older_state  # type: ignore[method-assign]
    seen = _publications_to(cluster, follower)
    cluster.network.heal()
    assert cluster.run_until(lambda: _caught_up(leader, follower), 5 * SECOND)
    assert [message.state is not None for message in seen][:2] == [False, True], "a diff, then the full state"
    assert follower.node.id in leader.running().applied_state.nodes, "caught up without being removed"
