"""membership.py: the non-voters' pool size, members that came back without their data, a quorum lost for good,
and status.nodes. Pure: observations in."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from coordinated.operator import membership
from coordinated.operator.observation import ClusterView, Observation, PodObservation

UUID = "uuid-1"


def cluster(
    pods: dict[str, str],
    voters: tuple[str, ...],
    master: str | None = "demo-0",
    names_by_id: dict[str, str] | None = None,
    **changes: Any,
) -> Observation:
    """`pods`: pod -> the node id it reports now; `voters`: the committed configuration's ids."""
    known = names_by_id if names_by_id is not None else {node_id: pod for pod, node_id in pods.items()}
    view = ClusterView(
        reachable=frozenset(pods),
        cluster_uuids=frozenset({UUID}),
        master=master,
        members=frozenset(pods) if master else frozenset(),
        voter_ids=frozenset(voters),
        node_ids=dict(pods),
        names_by_id=known,
    )
    observed = {name: PodObservation(name, ready=True, ip="10.0.0.1", voting="nonvoter" not in name) for name in pods}
    return replace(Observation("demo", 3, 3, pods=observed, cluster=view, recorded_cluster_uuid=UUID), **changes)


def previous(**ids: str) -> list[dict[str, Any]]:
    return [{"name": pod.replace("_", "-"), "nodeId": node_id} for pod, node_id in ids.items()]


# ---- non-voters --------------------------------------------------------------------------------------
def test_non_voters_grow_only_with_a_master_and_shrink_at_once() -> None:
    obs = cluster({"demo-0": "a"}, ("a",), desired_nonvoters=4, nonvoter_statefulset_replicas=2)
    assert membership.nonvoter_replicas(obs) == 4  # in one step: none of them votes
    assert membership.nonvoter_replicas(replace(obs, cluster=ClusterView())) == 2  # no master to join
    assert membership.nonvoter_replicas(replace(obs, desired_nonvoters=0)) == 0
    assert membership.nonvoter_replicas(replace(obs, hibernated_voters=3)) == 2  # waking: voters first
    assert membership.nonvoter_replicas(replace(obs, desired_nonvoters=0, nonvoter_statefulset_replicas=None)) is None
    new = replace(obs, recorded_cluster_uuid=None, nonvoter_statefulset_replicas=None)
    assert membership.nonvoter_replicas(new) == 0  # not before the bootstrap


# ---- members that lost their data ----------------------------------------------------------------------
def test_a_voter_back_without_its_data_is_reported_until_the_master_replaced_it() -> None:
    before = previous(demo_0="a", demo_1="b", demo_2="c")
    # demo-2's claim was lost: its pod runs a new node, f, not joined yet; c is still a voter.
    obs = cluster({"demo-0": "a", "demo-1": "b", "demo-2": "f"}, ("a", "b", "c"), names_by_id={"a": "demo-0"})
    replaced = membership.replacements(obs, before)
    assert replaced == [membership.Replacement("demo-2", "c", "f")]
    condition = membership.replacement_condition(replaced, None)
    assert condition.status and condition.reason == "Replacing"
    assert "demo-2 lost its data and runs as new node f" in condition.message and "old node c" in condition.message
    assert membership.voting_config_names(obs, replaced, before) == ["demo-0", "demo-1", "demo-2 (lost node c)"]
    ((kind, reason, message),) = membership.replacement_events(replaced, before, obs)
    assert (kind, reason) == ("Warning", "ReplacingMember") and "as new node f" in message
    entries = membership.node_entries(obs, replaced, {})
    assert entries[2] == {
        "name": "demo-2",
        "nodeId": "f",
        "role": "voter",
        "voting": False,
        "ready": True,
        "image": None,
        "kubernetesNode": None,
        "zone": None,
        "replacing": "c",
    }
    assert membership.quorum_lost(obs, replaced) is None  # 2 of 3 voters remain, and a master

    # The next pass says nothing new; then the master swaps c for f: one more Event, the condition clears.
    during = membership.node_entries(obs, replaced, {})
    assert membership.replacement_events(replaced, during, obs) == []
    healed = cluster({"demo-0": "a", "demo-1": "b", "demo-2": "f"}, ("a", "b", "f"))
    assert membership.replacements(healed, during) == []
    ((kind, reason, message),) = membership.replacement_events([], during, healed)
    assert (kind, reason) == ("Normal", "MemberReplaced")
    assert message == "demo-2's lost node c left the voting configuration; demo-2 votes again as node f"
    done = membership.replacement_condition([], {"status": "True", "reason": "Replacing"})
    assert (done.status, done.reason) == (False, "Replaced")
    assert membership.voting_config_names(healed, [], during) == ["demo-0", "demo-1", "demo-2"]


def test_two_voters_lost_one_after_the_other_heal_one_at_a_time() -> None:
    first = cluster({"demo-0": "a", "demo-1": "e", "demo-2": "c"}, ("a", "b", "c"))
    assert [r.pod for r in membership.replacements(first, previous(demo_1="b"))] == ["demo-1"]
    healed = cluster({"demo-0": "a", "demo-1": "e", "demo-2": "c"}, ("a", "e", "c"))
    assert membership.replacements(healed, previous(demo_1="e")) == []
    second = cluster({"demo-0": "a", "demo-1": "e", "demo-2": "g"}, ("a", "e", "c"))
    assert [r.pod for r in membership.replacements(second, previous(demo_1="e", demo_2="c"))] == ["demo-2"]


def test_two_of_three_voters_lost_at_once_is_a_quorum_lost_for_good() -> None:
    # The survivor, demo-0, holds the configuration {a, b, c}; demo-1 and demo-2 came back as e and f.
    obs = cluster({"demo-0": "a", "demo-1": "e", "demo-2": "f"}, ("a", "b", "c"), master=None)
    replaced = membership.replacements(obs, previous(demo_0="a", demo_1="b", demo_2="c"))
    message = membership.quorum_lost(obs, replaced)
    assert message is not None
    assert message.startswith("the quorum is lost for good: 2 of the 3 voters lost their data")
    assert "demo-1 (node b, now e)" in message and "coordinated node-tool unsafe-bootstrap" in message
    assert "Recovering from quorum loss" in message
    # One voter lost and no master (say, an election under way): not lost for good.
    one = cluster({"demo-0": "a", "demo-1": "b", "demo-2": "f"}, ("a", "b", "c"), master=None)
    assert membership.quorum_lost(one, membership.replacements(one, previous(demo_2="c"))) is None
    # A pod that does not answer yet is not counted as lost.
    silent = cluster({"demo-0": "a"}, ("a", "b", "c"), master=None)
    assert membership.replacements(silent, previous(demo_1="b", demo_2="c")) == []


def test_status_nodes_list_voters_then_non_voters_with_what_runs_where() -> None:
    obs = cluster({"demo-1": "b", "demo-0": "a", "demo-nonvoter-0": "n"}, ("a", "b"))
    obs = replace(
        obs,
        pods={
            **obs.pods,
            "demo-0": PodObservation("demo-0", ready=True, image="img:2", node_name="k1"),
            "demo-nonvoter-0": PodObservation("demo-nonvoter-0", voting=False, image="img:1", node_name="k2"),
        },
    )
    entries = membership.node_entries(obs, [], {"k1": "a", "k2": None})
    assert [(e["name"], e["role"], e["voting"], e["image"], e["zone"]) for e in entries] == [
        ("demo-0", "voter", True, "img:2", "a"),
        ("demo-1", "voter", True, None, None),
        ("demo-nonvoter-0", "nonvoter", False, "img:1", None),
    ]


def test_two_voters_lost_while_down_are_still_tied_to_their_pods_and_lose_the_quorum() -> None:
    # The pass that sees demo-1 and demo-2 down (their claims deleted) knows them only from the last status,
    # and the survivor's state no longer names their old ids.
    before = previous(demo_0="a", demo_1="b", demo_2="c")
    down = cluster({"demo-0": "a"}, ("a", "b", "c"), master=None, names_by_id={"a": "demo-0"})
    down = replace(down, pods={**down.pods, **{p: PodObservation(p, ready=False) for p in ("demo-1", "demo-2")}})
    while_down = membership.node_entries(down, [], {}, before)
    assert [(e["name"], e["nodeId"], e["voting"], e["ready"]) for e in while_down] == [
        ("demo-0", "a", True, True),
        ("demo-1", "b", True, False),
        ("demo-2", "c", True, False),
    ]
    back = cluster({"demo-0": "a", "demo-1": "e", "demo-2": "f"}, ("a", "b", "c"), master=None)
    back = replace(back, cluster=replace(back.cluster, names_by_id={"a": "demo-0", "e": "demo-1", "f": "demo-2"}))
    replaced = membership.replacements(back, while_down)
    assert [r.pod for r in replaced] == ["demo-1", "demo-2"]
    message = membership.quorum_lost(back, replaced)
    assert message is not None and "2 of the 3 voters lost their data" in message


def test_a_replacement_that_began_and_ended_between_two_passes_is_announced_and_reported() -> None:
    before = [{**entry, "voting": True} for entry in previous(demo_0="a", demo_1="b", demo_2="c")]
    # By the next pass the master has already swapped c for f.
    obs = cluster({"demo-0": "a", "demo-1": "b", "demo-2": "f"}, ("a", "b", "f"))
    replaced = membership.replacements(obs, before)
    assert replaced == []
    finished = membership.replaced_between_passes(obs, replaced, before)
    assert finished == [membership.Replacement("demo-2", "c", "f")]
    (started, ended) = membership.replacement_events(replaced, before, obs, finished)
    assert started[:2] == ("Warning", "ReplacingMember") and "new node f" in started[2] and "node c" in started[2]
    assert ended == (
        "Normal",
        "MemberReplaced",
        "demo-2's lost node c left the voting configuration; demo-2 votes again as node f",
    )
    condition = membership.replacement_condition(replaced, {"status": "False", "reason": "NoneLost"}, finished)
    assert (condition.status, condition.reason) == (False, "Replaced")
    # The pass after that sees the new id in the last status: nothing more.
    after = membership.node_entries(obs, [], {}, before)
    assert membership.replaced_between_passes(obs, [], after) == []
    # A voter that left the configuration with its id (a scale-down) was not replaced.
    shrunk = cluster({"demo-0": "a", "demo-1": "b", "demo-2": "c"}, ("a", "b"))
    assert membership.replaced_between_passes(shrunk, [], before) == []


def test_a_voter_reported_as_replacing_before_the_master_went_still_counts_as_lost() -> None:
    # The e2e recovery once waited forever for QuorumLost. demo-1 came back as e while a master was still up,
    # so the status recorded demo-1 as node e *replacing* b; demo-2 was down. Once demo-2 came back as f and
    # the master was gone, b must still be tied to demo-1 (the survivor's state no longer names it).
    before = [{**entry, "voting": True} for entry in previous(demo_0="a", demo_1="b", demo_2="c")]
    first = cluster({"demo-0": "a", "demo-1": "e"}, ("a", "b", "c"), names_by_id={"a": "demo-0", "e": "demo-1"})
    first = replace(first, pods={**first.pods, "demo-2": PodObservation("demo-2", ready=False)})
    replaced = membership.replacements(first, before)
    assert replaced == [membership.Replacement("demo-1", "b", "e")]
    recorded = membership.node_entries(first, replaced, {}, before)
    assert [(e["name"], e["nodeId"], e["replacing"]) for e in recorded] == [
        ("demo-0", "a", None),
        ("demo-1", "e", "b"),
        ("demo-2", "c", None),
    ]
    names = {"a": "demo-0", "e": "demo-1", "f": "demo-2"}
    back = cluster({"demo-0": "a", "demo-1": "e", "demo-2": "f"}, ("a", "b", "c"), master=None, names_by_id=names)
    replaced = membership.replacements(back, recorded)
    assert replaced == [membership.Replacement("demo-1", "b", "e"), membership.Replacement("demo-2", "c", "f")]
    message = membership.quorum_lost(back, replaced)
    assert message is not None and "2 of the 3 voters lost their data" in message
    # And the pass after that, from the status this one wrote, still says so.
    again = membership.node_entries(back, replaced, {}, recorded)
    assert membership.replacements(back, again) == replaced


def test_a_voter_whose_pod_is_briefly_gone_keeps_its_entry_so_its_replacement_is_announced() -> None:
    # The e2e once saw no ReplacingMember: a pass ran while demo-2's pod did not exist at all (deleted with
    # its claim, not yet created again). Had that pass dropped demo-2 from status.nodes, the next pass would
    # no longer know that c was demo-2's node, and the master's swap of c for f would go unannounced.
    before = [{**entry, "voting": True, "role": "voter"} for entry in previous(demo_0="a", demo_1="b", demo_2="c")]
    gone = cluster({"demo-0": "a", "demo-1": "b"}, ("a", "b", "c"), names_by_id={"a": "demo-0", "b": "demo-1"})
    while_gone = membership.node_entries(gone, [], {}, before)
    assert [(e["name"], e["nodeId"], e["voting"], e["ready"]) for e in while_gone] == [
        ("demo-0", "a", True, True),
        ("demo-1", "b", True, True),
        ("demo-2", "c", True, False),
    ]
    # The next pass: the master already swapped c for f.
    swapped = cluster({"demo-0": "a", "demo-1": "b", "demo-2": "f"}, ("a", "b", "f"))
    finished = membership.replaced_between_passes(swapped, [], while_gone)
    assert finished == [membership.Replacement("demo-2", "c", "f")]
    reasons = [reason for _, reason, _ in membership.replacement_events([], while_gone, swapped, finished)]
    assert reasons == ["ReplacingMember", "MemberReplaced"]
    # Or f has not joined yet: c is still a voter, tied to demo-2.
    waiting = cluster({"demo-0": "a", "demo-1": "b", "demo-2": "f"}, ("a", "b", "c"), names_by_id={"a": "demo-0"})
    assert membership.replacements(waiting, while_gone) == [membership.Replacement("demo-2", "c", "f")]
    # A pod the StatefulSet will not create again (scaled away) or a node out of the configuration is dropped.
    assert [e["name"] for e in membership.node_entries(replace(gone, statefulset_replicas=2), [], {}, before)] == [
        "demo-0",
        "demo-1",
    ]
    out = cluster({"demo-0": "a", "demo-1": "b"}, ("a", "b"))
    assert [e["name"] for e in membership.node_entries(out, [], {}, before)] == ["demo-0", "demo-1"]
