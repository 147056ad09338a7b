"""The coordinator's status snapshot, the typed no-master block, typed request results and master tasks told
apart by type: what the shells read instead of the core's components."""

from __future__ import annotations

from coordinated.coordination.client import ClusterError, Committed, ReadValue, checked_result
from coordinated.coordination.context import Mode
from coordinated.coordination.effects import WatchPeers
from coordinated.coordination.master_service import Priority, Task
from coordinated.coordination.peer_watch import PeerWatch
from coordinated.coordination.requests.cluster import UpdateSettings
from coordinated.coordination.requests.keys import KvGet, KvPut
from coordinated.coordination.state import DiscoveryNode
from coordinated.coordination.status import BlockLevel, HealthColour
from coordinated.coordination.tasks import NodeLeft, Reconfigure

from .harness import OneNode, leader, result_of


def test_a_master_reports_itself_green_with_no_block_in_force() -> None:
    node = leader()
    assert isinstance(result_of(node, KvPut("a", 1)), Committed)
    status = node.coordinator.status()
    assert status.mode is Mode.LEADER and status.leader == node.node.id
    assert status.health is HealthColour.GREEN
    assert status.formation_problem is None
    assert not status.no_master_block.in_force and not status.no_master_block.refuses_local_reads
    assert status.last_committed_version == node.coordinator.applied_state.version >= 2
    assert status.follower_lag == {}  # no followers
    assert status.state_bytes is not None and status.state_bytes > 0  # the master measured what it built
    assert status.elections_won == 1


def test_a_node_without_a_cluster_says_why_and_which_reads_it_refuses() -> None:
    node = OneNode.start(bootstrap=False)
    node.advance(5_000)
    status = node.coordinator.status()
    assert status.mode is Mode.CANDIDATE and status.leader is None
    assert status.health is HealthColour.RED
    assert status.formation_problem is not None and "initial_master_nodes is empty" in status.formation_problem
    block = status.no_master_block
    assert block.in_force and block.level is BlockLevel.WRITE and not block.refuses_local_reads
    assert status.follower_lag is None and status.state_bytes is None


def test_the_no_master_block_all_refuses_local_reads_with_its_level_named() -> None:
    node = leader()
    assert isinstance(result_of(node, UpdateSettings({"cluster.no_master_block": "all"})), Committed)
    assert not node.coordinator.status().no_master_block.refuses_local_reads  # a master: not in force
    node.coordinator.applied_state = node.coordinator.applied_state.replace(master_node=None)  # as after a loss
    block = node.coordinator.status().no_master_block
    assert block.level is BlockLevel.ALL and block.refuses_local_reads
    error = block.error()
    assert error.status == 503 and "no_master_block is [all]" in error.reason


def test_a_result_of_the_wrong_type_becomes_one_internal_error_naming_both() -> None:
    read = ReadValue("k", True, "v", 1, 2)
    assert checked_result(KvGet("k"), read) is read
    error = ClusterError("x", "y", 409)
    assert checked_result(KvGet("k"), error) is error
    wrong = checked_result(KvGet("k"), Committed(1, 2))
    assert isinstance(wrong, ClusterError) and wrong.status == 500
    assert wrong.reason == "unexpected result Committed to KvGet"


def test_master_tasks_are_told_apart_by_their_type_not_their_text() -> None:
    node = leader()
    tasks = node.coordinator.master_tasks
    # Queued directly (submitting runs them at once): a task whose text says "reconfigure" but is not one.
    tasks.queue.add(Task("reconfigure", Priority.IMMEDIATE, NodeLeft("nobody"), lambda result: None))
    assert not tasks.is_pending(Reconfigure) and tasks.is_pending(NodeLeft)
    tasks.queue.add(Task("anything", Priority.URGENT, Reconfigure(), lambda result: None))
    assert tasks.is_pending(Reconfigure)


def test_peer_watch_names_the_followers_while_leading_and_the_master_while_following() -> None:
    me, a, b = (DiscoveryNode(name, name, f"{name}:9300", ("master",)) for name in ("me", "a", "b"))
    nodes = {node.id: node for node in (me, a, b)}
    watch = PeerWatch(me.id)
    assert watch.update(Mode.CANDIDATE, None, nodes) is None  # nothing watched yet, nothing to say
    assert watch.update(Mode.LEADER, me, nodes) == WatchPeers(frozenset({"a:9300", "b:9300"}))
    assert watch.update(Mode.LEADER, me, nodes) is None  # same inputs: said once
    assert watch.update(Mode.LEADER, me, {me.id: me, a.id: a}) == WatchPeers(frozenset({"a:9300"}))
    assert watch.update(Mode.FOLLOWER, b, nodes) == WatchPeers(frozenset({"b:9300"}))
    assert watch.update(Mode.CANDIDATE, None, nodes) == WatchPeers(frozenset())


def test_the_status_carries_the_applied_max_state_size() -> None:
    node = leader()
    assert node.coordinator.status().max_state_bytes == 256 * 1024 * 1024
    assert isinstance(result_of(node, UpdateSettings({"cluster.metadata.max_state_size": "1mb"})), Committed)
    assert node.coordinator.status().max_state_bytes == 1024 * 1024
