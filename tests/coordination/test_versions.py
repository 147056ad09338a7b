"""Clusters of mixed releases in the simulator: nodes of the previous release (`wire_versions.UNVERSIONED`, which
sends no version and decodes no gated field: `simulation/versions.py`) beside this tree's, rolling upgrades in
both orders, rollbacks, the version barrier, feature gates, and random fault schedules that also upgrade and
roll back nodes. Every run also checks that no gated state field is ever published to a node known to lack it,
or lost once committed (`GatedFieldWatch`)."""

from __future__ import annotations

import os

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinated.coordination import feature_gates
from coordinated.coordination import messages as m
from coordinated.coordination.client import FEATURE_NOT_AVAILABLE, ClientResult, ClusterError, Committed
from coordinated.coordination.effects import Log, Send
from coordinated.coordination.node_versions import NodeVersions
from coordinated.coordination.requests.keys import KvDeletePrefix, KvGet, KvPut
from coordinated.coordination.state import DiscoveryNode, initial_state
from coordinated.coordination.wire_versions import NODE_VERSIONS, UNVERSIONED, newest
from coordinated.simulation.chaos import run_random_schedule
from coordinated.simulation.cluster import SimulatedCluster, stabilisation_time
from coordinated.simulation.linearizability import check_history

EXAMPLES = int(os.environ.get("SIM_EXAMPLES", "200")) // 8 or 1
OLD, NEW = UNVERSIONED, newest()


def moved(cluster: SimulatedCluster) -> bool:
    leader = cluster.leader()
    return leader is not None and leader.running().applied_state.node_versions is not msgspec.UNSET


class Writer:
    """Writes one key after another through every node in turn, and reads them back; never stops on its own."""

    def __init__(self, cluster: SimulatedCluster, client: int = 1) -> None:
        self.cluster = cluster
        self.client = client
        self.count = 0
        self.active = True

    def start(self) -> None:
        self.next()

    def next(self, result: ClientResult | None = None) -> None:
        if not self.active:
            return
        self.count += 1
        alive = [node for node in self.cluster.nodes if node.alive]
        node = alive[self.count % len(alive)]
        request = KvPut(f"k{self.count % 5}", self.count) if self.count % 3 else KvGet(f"k{self.count % 5}")
        self.cluster.schedule(
            self.cluster.now + 50, lambda: self.cluster.submit(node.index, request, self.client, self.next)
        )


def upgrade(cluster: SimulatedCluster, order: str) -> list[bool]:
    """Restart every node on this release, one at a time, followers first and the master last, or the master
    first (and then whichever node is master next); whether the cluster had moved after each step."""
    after_each = []
    for _ in range(len(cluster.nodes)):
        leader = cluster.leader()
        assert leader is not None
        old = [node for node in cluster.nodes if node.version == OLD]
        followers = [node for node in old if node is not leader]
        target = leader if (order == "master_first" and leader in old) or not followers else followers[0]
        cluster.restart(target.index, version=NEW)
        # Clients keep writing: wait for a master with every node, rather than for a quiet cluster.
        assert cluster.run_until(lambda: all_joined(cluster), stabilisation_time(cluster.nodes[0].settings))
        cluster.run_for(2_000)  # a few follower checks: the master learns the new node's version
        after_each.append(moved(cluster))
    return after_each


def all_joined(cluster: SimulatedCluster) -> bool:
    leader = cluster.leader()
    return leader is not None and set(leader.running().applied_state.nodes) == {node.node.id for node in cluster.nodes}


@pytest.mark.parametrize("order", ["followers_first", "master_first"])
@pytest.mark.parametrize("size", [3, 5])
def test_a_rolling_upgrade_keeps_every_write_and_moves_the_cluster_once_the_last_node_runs_this_release(
    order: str, size: int
) -> None:
    cluster = SimulatedCluster(7, size, versions=[OLD] * size)
    cluster.run_for(3_000)
    writer = Writer(cluster)
    writer.start()
    steps = upgrade(cluster, order)
    writer.active = False
    cluster.stabilise()
    cluster.finish_pending_operations()
    # The previous release's forms until the last node runs this one; then every node's version, by itself.
    assert steps == [False] * (size - 1) + [True]
    leader = cluster.leader()
    assert leader is not None
    status = leader.running().status().versions
    assert status.cluster_version == NEW and all(status.features.values()) and NODE_VERSIONS.name in status.features
    assert leader.running().applied_state.node_versions == {node.node.id: NEW for node in cluster.nodes}
    verdict = check_history(cluster.operations)
    assert verdict.ok, verdict.detail
    acknowledged = [op for op in cluster.operations if op.kind == "put" and op.certain]
    assert len(acknowledged) > 20


def test_a_node_rolled_back_before_the_move_rejoins_and_one_rolled_back_after_it_refuses_to_start() -> None:
    cluster = SimulatedCluster(3, 3, versions=[OLD] * 3)
    cluster.run_for(3_000)
    cluster.restart(0, version=NEW)
    cluster.stabilise()
    cluster.restart(0, version=OLD)  # the partial rollback: the cluster never moved
    cluster.stabilise()
    leader = cluster.leader()
    assert leader is not None and len(leader.running().applied_state.nodes) == 3 and not moved(cluster)
    for index in range(3):
        cluster.restart(index, version=NEW)
        cluster.stabilise()
    assert moved(cluster)
    cluster.restart(1, version=OLD)  # its store holds what the previous release does not read
    assert cluster.nodes[1].refused is not None and "node_versions" in cluster.nodes[1].refused
    cluster.restart(1, version=NEW)  # upgraded again, it reads its store and rejoins
    cluster.stabilise()
    assert cluster.nodes[1].alive and moved(cluster)


def test_a_voter_of_the_previous_release_that_is_away_keeps_the_cluster_from_moving_and_comes_back() -> None:
    """A voter whose version no live node knows (it went away, and the nodes that heard from it restarted since)
    counts as the previous release: the upgrade is not taken as finished while it is away, and it comes back on
    its release."""
    cluster = SimulatedCluster(12, 3, versions=[OLD, NEW, NEW])
    cluster.stabilise()
    away = cluster.nodes[0]
    cluster.crash(away.index)
    cluster.run_for(3_000)
    for node in cluster.nodes[1:]:  # what they knew of it is gone with their processes
        cluster.restart(node.index)
    assert cluster.run_until(lambda: cluster.leader() is not None, 30_000)
    cluster.run_for(5_000)
    leader = cluster.leader()
    assert leader is not None and leader.running().status().versions.node_versions[away.node.id] is None
    assert not moved(cluster)
    cluster.start_node(away.index)
    cluster.stabilise()
    leader = cluster.leader()
    assert leader is not None and away.node.id in leader.running().applied_state.nodes


def test_the_version_barrier_keeps_a_node_of_an_older_release_out_of_a_cluster_that_moved() -> None:
    cluster = SimulatedCluster(5, 3)
    cluster.run_for(3_000)
    cluster.stabilise()
    assert moved(cluster)
    newcomer = cluster.add_node(version=OLD)
    cluster.run_for(5_000)
    leader = cluster.leader()
    assert leader is not None and newcomer.node.id not in leader.running().applied_state.nodes
    problem = newcomer.running().status().formation_problem
    assert problem is not None
    assert (
        f"node [{newcomer.name}] runs release {OLD.describe()}, but every node of this cluster runs {NEW.release} or "
        "later" in problem
    )
    # Upgraded, it joins.
    cluster.restart(newcomer.index, version=NEW)
    cluster.run_for(5_000)
    assert newcomer.node.id in leader.running().applied_state.nodes


def test_before_the_move_an_older_node_joins_and_the_cluster_keeps_the_previous_releases_forms() -> None:
    cluster = SimulatedCluster(6, 3, versions=[NEW, NEW, OLD])
    cluster.run_for(3_000)
    cluster.stabilise()
    assert not moved(cluster)
    newcomer = cluster.add_node(version=OLD)
    cluster.run_for(5_000)
    leader = cluster.leader()
    assert leader is not None and newcomer.node.id in leader.running().applied_state.nodes
    lacking = leader.running().status().versions
    assert not any(lacking.features.values()) and lacking.cluster_version == OLD


@pytest.fixture
def gated_delete_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gate as the next request gate will be declared: here a prefix delete needs feature `node_versions`."""
    gate = (NODE_VERSIONS, lambda request: isinstance(request, KvDeletePrefix))
    monkeypatch.setattr(feature_gates, "REQUEST_GATES", (gate,))


def submit_and_wait(cluster: SimulatedCluster, index: int, request: KvDeletePrefix) -> tuple[ClientResult, int]:
    results: list[tuple[ClientResult, int]] = []
    cluster.submit(index, request, on_done=lambda result: results.append((result, cluster.now)))
    cluster.run_until(lambda: bool(results), 10_000, step=10)
    return results[0]


@pytest.mark.usefixtures("gated_delete_prefix")
def test_a_request_that_needs_a_feature_some_node_lacks_is_refused_at_once_and_works_once_it_has_it() -> None:
    cluster = SimulatedCluster(4, 3, versions=[NEW, NEW, OLD])
    cluster.run_for(3_000)
    cluster.stabilise()
    sent: list[tuple[str, m.Message]] = []
    cluster.tap = lambda sender, destination, message: sent.append((sender, message))
    for index in (0, 1):  # through each upgraded node, whoever is master (the old node's code is this tree's)
        submitted_at = cluster.now
        result, done_at = submit_and_wait(cluster, index, KvDeletePrefix("p/"))
        assert isinstance(result, ClusterError) and result.type == FEATURE_NOT_AVAILABLE and result.status == 400
        assert done_at == submitted_at  # refused in the same step: nothing was forwarded or waited for
        assert f"feature [{NODE_VERSIONS.name}]" in result.reason
        assert f"[node2 ({OLD.describe()})] lack it" in result.reason
    assert not any(isinstance(message, m.ForwardedRequest) for _, message in sent)
    cluster.restart(2, version=NEW)
    cluster.stabilise()
    result, _ = submit_and_wait(cluster, 0, KvDeletePrefix("p/"))
    assert isinstance(result, Committed)


def test_no_node_of_a_moved_cluster_votes_for_a_candidate_of_an_older_release() -> None:
    local = DiscoveryNode("local", "local", "local:9300")
    candidate = DiscoveryNode("old", "old", "old:9300")
    versions = NodeVersions(local)
    unmoved = initial_state("c")
    moved_state = unmoved.replace(node_versions={"local": NEW, "other": NEW})
    assert versions.candidate_problem(candidate, OLD, unmoved) is None
    assert versions.candidate_problem(candidate, NEW, moved_state) is None
    problem = versions.candidate_problem(candidate, OLD, moved_state)
    assert (
        problem
        == f"not voting for old, which runs release {OLD.describe()}: every node of this cluster runs 0.2.0 or later"
    )
    # In a cluster: a node that knows the moved state neither pre-votes nor joins for such a candidate.
    cluster = SimulatedCluster(9, 3)
    cluster.run_for(3_000)
    cluster.stabilise()
    follower = next(node for node in cluster.nodes if node is not cluster.leader())
    term = follower.running().current_term
    request = m.StartJoinRequest(candidate, term + 5, follower.running().last_accepted_state.cluster_uuid, "0.1.0", 1)
    effects = follower.running().handle_message("old:9300", request, cluster.now)
    assert follower.running().current_term == term
    assert not [e for e in effects if isinstance(e, Send) and isinstance(e.message, m.JoinRequest)]
    vote = m.PreVoteRequest(candidate, term, follower.running().last_accepted_state.cluster_uuid, "0.1.0", 1)
    effects = follower.running().handle_message("old:9300", vote, cluster.now)
    assert not [e for e in effects if isinstance(e, Send) and isinstance(e.message, m.PreVoteResponse)]


def test_a_message_this_node_cannot_decode_gets_a_refusal_its_sender_understands_logged_once() -> None:
    cluster = SimulatedCluster(2, 3)
    cluster.run_for(3_000)
    node = cluster.nodes[0].running()
    effects = [
        *node.handle_undecodable("n9:9300", "forwarded_request", 41, "Invalid value 'new_op'", cluster.now),
        *node.handle_undecodable("n9:9300", "forwarded_request", 42, "Invalid value 'new_op'", cluster.now),
        *node.handle_undecodable("n9:9300", "new_message", None, "Invalid value 'new_message'", cluster.now),
    ]
    answers = [e.message for e in effects if isinstance(e, Send)]
    assert [answer.request_id for answer in answers if isinstance(answer, m.ForwardedResponse)] == [41, 42]
    refusal = answers[0].result if isinstance(answers[0], m.ForwardedResponse) else None
    assert isinstance(refusal, ClusterError) and refusal.type == FEATURE_NOT_AVAILABLE and refusal.status == 400
    assert "cannot decode this request (Invalid value 'new_op')" in refusal.reason
    logged = [e.message for e in effects if isinstance(e, Log) and e.level == "warning"]
    assert len(logged) == 2  # once per sender and kind
    assert "[forwarded_request]" in logged[0] and "[new_message]" in logged[1]


def run_and_check(seed: int, nodes: int) -> None:
    try:
        report = run_random_schedule(seed, nodes, counters=2, sessions=2, transfers=2, ranges=2, upgrades=True)
    except AssertionError as error:
        raise AssertionError(
            f"{error}\nreplay with run_random_schedule({seed}, {nodes}, upgrades=True, ...)"
        ) from error
    assert report.linearizability is not None and report.linearizability.ok, report.linearizability
    assert report.operations > 0


@pytest.mark.parametrize(("seed", "nodes"), [(1, 3), (2, 5), (8, 7), (14, 5)])
def test_random_schedules_with_upgrades_and_rollbacks_are_safe_and_lose_no_gated_field(seed: int, nodes: int) -> None:
    run_and_check(seed, nodes)


@pytest.mark.slow
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not os.environ.get("SIM_RANDOM"),
    suppress_health_check=list(HealthCheck),
)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1), nodes=st.integers(min_value=3, max_value=7))
def test_random_schedules_of_mixed_releases_are_safe_live_and_linearizable(seed: int, nodes: int) -> None:
    run_and_check(seed, nodes)
