from __future__ import annotations

import pytest

from coordinated.coordination.client import ClientRequest, Committed
from coordinated.coordination.offline_recovery import (
    MUST_JOIN_ELECTED_MASTER,
    UNSAFE_BOOTSTRAP_SETTING,
    ToolRefusal,
    plan_detach,
    plan_remove_settings,
    plan_unsafe_bootstrap,
)
from coordinated.coordination.requests.cluster import UpdateSettings
from coordinated.coordination.requests.keys import KvPut
from coordinated.coordination.state import (
    ClusterState,
    CoordinationMetadata,
    DiscoveryNode,
    VotingConfigExclusion,
    VotingConfiguration,
    initial_state,
)
from coordinated.simulation.cluster import SimulatedCluster


def three_node_state(roles: tuple[str, ...] = ("master",)) -> ClusterState:
    nodes = {
        n: DiscoveryNode(n, f"node-{n}", f"127.0.0.1:{9300 + i}", roles if n == "a" else ("master",))
        for i, n in enumerate("abc")
    }
    config = VotingConfiguration.of("abc")
    return initial_state("c").replace(
        cluster_uuid="old-uuid",
        cluster_uuid_committed=True,
        version=12,
        state_uuid="s12",
        parent_uuid="s11",
        master_node="b",
        nodes=nodes,
        coordination=CoordinationMetadata(
            term=4,
            last_committed_config=config,
            last_accepted_config=config,
            voting_config_exclusions=(VotingConfigExclusion("c", "node-c"),),
        ),
        persistent_settings={"cluster.publish.timeout": "5s"},
        kv={"k1": 1, "k2": {"x": [1, 2]}},
    )


def test_unsafe_bootstrap_makes_the_node_the_sole_voter_of_a_new_cluster_with_its_data() -> None:
    old = three_node_state()
    plan = plan_unsafe_bootstrap("a", 5, old, "new-uuid", "s-new")
    new = plan.state
    assert plan.current_term == 5
    assert new.last_committed_config == new.last_accepted_config == VotingConfiguration.of(["a"])
    assert new.coordination.voting_config_exclusions == ()
    assert (new.cluster_uuid, new.cluster_uuid_committed) == ("new-uuid", True)
    assert new.kv == old.kv
    assert dict(new.persistent_settings) == {"cluster.publish.timeout": "5s", UNSAFE_BOOTSTRAP_SETTING: "true"}
    assert (new.term, new.version, new.state_uuid, new.parent_uuid) == (4, 13, "s-new", "s12")
    assert new.master_node is None and list(new.nodes) == ["a"]
    assert "(4, 12)" in plan.description and "new-uuid" in plan.description


def test_unsafe_bootstrap_event_carries_the_new_cluster_and_marks_both_records_satisfy() -> None:
    event = plan_unsafe_bootstrap("a", 5, three_node_state(), "new-uuid", "s-new").event
    assert event["type"] == "unsafe_bootstrap"
    assert (event["cluster_uuid"], event["previous_cluster_uuid"]) == ("new-uuid", "old-uuid")
    assert (event["term"], event["version"], event["state_uuid"], event["parent_uuid"]) == (4, 13, "s-new", "s12")
    assert event["last_committed_config"] == event["last_accepted_config"] == ["a"]
    # the old record holds (4, 12), the new one (4, 13): the marks are the lower
    assert (event["marks_term"], event["marks_accepted"]) == (5, [4, 12])


def test_unsafe_bootstrap_refuses_a_node_that_was_never_bootstrapped() -> None:
    with pytest.raises(ToolRefusal, match="never part of a bootstrapped cluster"):
        plan_unsafe_bootstrap("a", 0, initial_state("c"), "u", "s")


def test_unsafe_bootstrap_refuses_a_node_that_is_not_master_eligible() -> None:
    with pytest.raises(ToolRefusal, match="not master-eligible"):
        plan_unsafe_bootstrap("a", 5, three_node_state(roles=()), "u", "s")


def test_detach_forgets_term_and_membership_but_keeps_the_uuid_uncommitted() -> None:
    old = three_node_state()
    plan = plan_detach("a", 5, old, "s-detached")
    new = plan.state
    assert plan.current_term == 0 and new.term == 0
    assert (new.cluster_uuid, new.cluster_uuid_committed) == ("old-uuid", False)
    assert new.last_committed_config == new.last_accepted_config == MUST_JOIN_ELECTED_MASTER
    assert new.coordination.voting_config_exclusions == ()
    assert new.master_node is None and (new.state_uuid, new.parent_uuid) == ("s-detached", "s12")
    event = plan.event
    assert event["type"] == "detached" and event["cluster_uuid_committed"] is False
    assert (event["marks_term"], event["marks_accepted"]) == (0, [0, 12])


def test_detach_refuses_a_node_that_never_joined_a_cluster() -> None:
    with pytest.raises(ToolRefusal, match="never joined a cluster"):
        plan_detach("a", 0, initial_state("c"), "s")


def test_remove_settings_keeps_term_version_and_keys_under_a_new_uuid() -> None:
    old = three_node_state().replace(
        persistent_settings={
            "cluster.publish.timeout": "5s",
            "cluster.metadata.max_value_size": "64b",
            "cluster.metadata.max_state_size": "1kb",
            "cluster.no_master_block": "all",
            UNSAFE_BOOTSTRAP_SETTING: "true",
        }
    )
    plan = plan_remove_settings("a", 5, old, ["cluster.metadata.*", "cluster.publish.timeout"], "s-fixed")
    new = plan.state
    assert dict(new.persistent_settings) == {"cluster.no_master_block": "all", UNSAFE_BOOTSTRAP_SETTING: "true"}
    assert plan.current_term == 5 and (new.term, new.version) == (old.term, old.version)
    assert (new.kv, new.coordination, new.nodes, new.master_node) == (old.kv, old.coordination, old.nodes, "b")
    assert (new.state_uuid, new.parent_uuid) == ("s-fixed", "s12")
    assert "cluster.metadata.max_value_size: 64b" in plan.description and "every master-eligible" in plan.description
    event = plan.event
    assert event["type"] == "settings_removed" and event["node_name"] == "node-a"
    assert event["settings"] == [
        "cluster.metadata.max_state_size",
        "cluster.metadata.max_value_size",
        "cluster.publish.timeout",
    ]
    assert (event["term"], event["version"], event["state_uuid"], event["parent_uuid"]) == (4, 12, "s-fixed", "s12")
    assert (event["current_term"], event["previous_state_uuid"]) == (5, "s12")
    assert "marks_term" not in event, "the term and the accepted (term, version) do not change"


def test_remove_settings_refuses_when_nothing_matches_and_never_removes_the_unsafe_bootstrap_marker() -> None:
    old = three_node_state().replace(persistent_settings={UNSAFE_BOOTSTRAP_SETTING: "true", "cluster.x": "1"})
    with pytest.raises(ToolRefusal, match=r"matches \['cluster.metadata.\*'\]; it holds \['cluster.x'\]"):
        plan_remove_settings("a", 5, old, ["cluster.metadata.*"], "s")
    assert dict(plan_remove_settings("a", 5, old, ["*"], "s").state.persistent_settings) == {
        UNSAFE_BOOTSTRAP_SETTING: "true"
    }
    with pytest.raises(ToolRefusal, match="it holds none"):
        plan_remove_settings("a", 5, three_node_state().replace(persistent_settings={}), ["*"], "s")


def _commit_through_the_master(cluster: SimulatedCluster, *requests: ClientRequest) -> None:
    cluster.stabilise()
    leader = cluster.leader()
    assert leader is not None
    results: list[object] = []
    for request in requests:
        cluster.submit(leader.index, request, on_done=results.append)
    assert cluster.run_until(lambda: len(results) == len(requests), 10_000)
    assert all(isinstance(result, Committed) for result in results), results
    cluster.run_for(2_000)


def _remove_settings_on(cluster: SimulatedCluster, indexes: list[int]) -> None:
    """Stop every node, run the node tool on some of them, start them all again."""
    for node in cluster.nodes:
        cluster.crash(node.index)
    for index in indexes:
        cluster.remove_settings(index, ["cluster.no_master_block"])
    for node in cluster.nodes:
        cluster.start_node(node.index)


def test_remove_settings_on_every_node_of_a_stopped_cluster_removes_them_for_good() -> None:
    """The way out without a master: the simulator's checks (one state per (term, version) among the states the
    nodes publish, committed states descending from each other) hold across the rewritten copies, the nodes
    that held the old copy get the full state, and the setting is gone everywhere."""
    cluster = SimulatedCluster(3, 3)
    _commit_through_the_master(cluster, UpdateSettings({"cluster.no_master_block": "all"}), KvPut("kept", 1))
    _remove_settings_on(cluster, [0, 1, 2])
    _commit_through_the_master(cluster, KvPut("after", 2))
    for node in cluster.nodes:
        state = node.running().applied_state
        assert dict(state.persistent_settings) == {} and dict(state.kv) == {"kept": 1, "after": 2}
        assert [event["type"] for event in node.history].count("settings_removed") == 1


@pytest.mark.parametrize("seed", [3, 4, 5, 6])
def test_a_node_that_removed_settings_alone_never_holds_a_state_that_differs_under_the_same_uuid(seed: int) -> None:
    """Run on one node only, the removal lasts only if that node is elected; either way every node ends with the
    same settings, because the rewritten copy has its own uuid and a diff against the old one is refused."""
    cluster = SimulatedCluster(seed, 3)
    _commit_through_the_master(cluster, UpdateSettings({"cluster.no_master_block": "all"}))
    _remove_settings_on(cluster, [seed % 3])
    _commit_through_the_master(cluster, KvPut("after", 2))
    states = [node.running().applied_state for node in cluster.nodes]
    assert len({state.state_uuid for state in states}) == 1
    assert all(dict(state.persistent_settings) == dict(states[0].persistent_settings) for state in states)
