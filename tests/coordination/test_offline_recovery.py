from __future__ import annotations

import pytest

from coordinated.coordination.offline_recovery import (
    MUST_JOIN_ELECTED_MASTER,
    UNSAFE_BOOTSTRAP_SETTING,
    ToolRefusal,
    plan_detach,
    plan_unsafe_bootstrap,
)
from coordinated.coordination.state import (
    ClusterState,
    CoordinationMetadata,
    DiscoveryNode,
    VotingConfigExclusion,
    VotingConfiguration,
    initial_state,
)


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
