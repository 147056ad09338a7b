"""placement.py: each pool's scheduling fields (the user's, merged with the operator's preferred spreading) and
what the status says of the voters' placement and of pods the scheduler cannot place."""

from __future__ import annotations

from typing import Any

from coordinated.operator import manifests, placement
from coordinated.operator.spec import ClusterSpec


def spec(**fields: Any) -> ClusterSpec:
    return ClusterSpec.from_resource({"metadata": {"name": "demo", "namespace": "ns"}, "spec": fields})


def pod_spec(cluster: ClusterSpec, voting: bool = True) -> dict[str, Any]:
    rendered = manifests.statefulset(cluster, 3, voting=voting)["spec"]["template"]["spec"]
    return dict(rendered)


VOTERS = {
    "matchLabels": {"app.kubernetes.io/name": "coordinated-cluster", "app.kubernetes.io/instance": "demo"},
    "matchExpressions": [{"key": "coordinated.dev/voting", "operator": "NotIn", "values": ["false"]}],
}


def test_by_default_voters_prefer_distinct_nodes_and_zones() -> None:
    rendered = pod_spec(spec())
    assert rendered["affinity"] == {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": VOTERS}}
            ]
        }
    }
    assert rendered["topologySpreadConstraints"] == [
        {
            "labelSelector": VOTERS,
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",  # a preference: one node, or nodes without zones, still schedule
        }
    ]
    for absent in ("nodeSelector", "tolerations", "priorityClassName"):
        assert absent not in rendered


def test_non_voters_spread_among_themselves() -> None:
    rendered = pod_spec(spec(), voting=False)
    selector = rendered["topologySpreadConstraints"][0]["labelSelector"]
    assert selector == {
        "matchLabels": {
            "app.kubernetes.io/name": "coordinated-cluster",
            "app.kubernetes.io/instance": "demo",
            "coordinated.dev/voting": "false",
        }
    }
    term = rendered["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["podAffinityTerm"]["labelSelector"] == selector


def test_the_users_scheduling_is_used_as_written_and_replaces_only_what_it_sets() -> None:
    node_affinity = {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["quorum"]}]}]
        }
    }
    toleration = {"key": "dedicated", "operator": "Equal", "value": "quorum", "effect": "NoSchedule"}
    rendered = pod_spec(
        spec(
            scheduling={
                "nodeSelector": {"disk": "ssd"},
                "tolerations": [toleration],
                "priorityClassName": "system-cluster-critical",
                "affinity": {"nodeAffinity": node_affinity},
            }
        )
    )
    assert rendered["nodeSelector"] == {"disk": "ssd"}
    assert rendered["tolerations"] == [toleration]
    assert rendered["priorityClassName"] == "system-cluster-critical"
    assert rendered["affinity"]["nodeAffinity"] == node_affinity
    assert "podAntiAffinity" in rendered["affinity"]  # the default stays: the user set none
    assert rendered["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"

    # A hard rule of the user's replaces the default, and [] turns the zone spreading off.
    hard = {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname"}]}
    rendered = pod_spec(spec(scheduling={"affinity": {"podAntiAffinity": hard}, "topologySpreadConstraints": []}))
    assert rendered["affinity"] == {"podAntiAffinity": hard}
    assert "topologySpreadConstraints" not in rendered
    # A constraint without a labelSelector counts the pool's pods; one with a selector keeps it.
    own = {"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule"}
    chosen = {**own, "labelSelector": {"matchLabels": {"app": "x"}}}
    rendered = pod_spec(spec(scheduling={"topologySpreadConstraints": [own, chosen]}))
    assert rendered["topologySpreadConstraints"] == [{"labelSelector": VOTERS, **own}, chosen]


def test_voters_on_distinct_nodes_and_zones_are_spread() -> None:
    condition = placement.voters_spread({"d-0": "n1", "d-1": "n2", "d-2": "n3"}, {"n1": "a", "n2": "b", "n3": "c"})
    assert (
        condition is not None
        and condition.status
        and condition.message == "3 voter(s) on 3 Kubernetes node(s) in 3 zone(s)"
    )
    # 5 voters over 3 zones (2, 2, 1): losing any zone leaves a majority.
    five = {f"d-{i}": f"n{i}" for i in range(5)}
    zones = {"n0": "a", "n1": "a", "n2": "b", "n3": "b", "n4": "c"}
    condition = placement.voters_spread(five, zones)
    assert condition is not None and condition.status
    no_zones = placement.voters_spread({"d-0": "n1", "d-1": "n2"}, {"n1": None, "n2": None})
    assert no_zones is not None and no_zones.status and "zones are not judged" in no_zones.message


def test_voters_sharing_a_node_or_a_majority_zone_are_reported() -> None:
    shared = placement.voters_spread({"d-0": "n1", "d-1": "n1", "d-2": "n2"}, {})
    assert shared is not None and (shared.status, shared.reason) == (False, "SharedNode")
    assert shared.message == (
        "d-0 and d-1 share node n1: one Kubernetes node's failure takes more than one of the 3 voters"
    )
    zone = placement.voters_spread({"d-0": "n1", "d-1": "n2", "d-2": "n3"}, {"n1": "a", "n2": "a", "n3": "b"})
    assert zone is not None and (zone.status, zone.reason) == (False, "SharedZone")
    assert zone.message == "zone a holds 2 of the 3 voters: losing it loses the quorum"
    single = placement.voters_spread({"d-0": "n1", "d-1": "n2", "d-2": "n3"}, {"n1": "a", "n2": "a", "n3": "a"})
    assert single is not None and single.message == "all 3 voters are in zone a: losing it loses the quorum"
    assert placement.voters_spread({}, {}) is None  # nothing scheduled yet
    one = placement.voters_spread({"d-0": "n1"}, {"n1": "a"})
    assert one is not None and one.status  # a single voter cannot be spread


def test_pods_the_scheduler_cannot_place_are_named_with_its_reason() -> None:
    reason = "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
    condition = placement.pods_scheduled({"d-1": reason})
    assert (condition.status, condition.reason) == (False, "Unschedulable")
    assert condition.message == f"d-1 cannot be scheduled: {reason}"
    assert placement.pods_scheduled({}).status


def test_the_pods_run_under_a_non_preempting_twin_of_the_requested_class() -> None:
    name, twin = placement.pod_priority_class("high", (5000, "PreemptLowerPriority"))
    assert twin is not None and name == "coordinated-nonpreempting-5000" == twin["metadata"]["name"]
    assert (twin["value"], twin["preemptionPolicy"], twin["globalDefault"]) == (5000, "Never", False)
    # A system class (2000000000) gets the highest value a class of another name may have.
    name, twin = placement.pod_priority_class("system-cluster-critical", (2_000_000_000, "PreemptLowerPriority"))
    assert twin is not None and (name, twin["value"]) == ("coordinated-nonpreempting-1000000000", 1_000_000_000)
    # A class that never preempts is used as it is; an unknown one as written (the API server says why not).
    assert placement.pod_priority_class("calm", (10, "Never")) == ("calm", None)
    assert placement.pod_priority_class("missing", None) == ("missing", None)
    assert placement.pod_priority_class(None, None) == (None, None)
    spec = ClusterSpec.from_resource(
        {"metadata": {"name": "demo"}, "spec": {"scheduling": {"priorityClassName": "high"}}}
    )
    assert placement.scheduling_fields(spec, {}, True, name)["priorityClassName"] == name
    assert placement.scheduling_fields(spec, {}, True)["priorityClassName"] == "high"


def test_voters_the_scheduler_does_not_place_are_reported_before_the_spread() -> None:
    """After a preemption the trial's VotersSpread said True: it only counted the one voter that ran."""
    condition = placement.voters_spread(
        {"demo-0": "n1"}, {"n1": None}, {"demo-1": "0/1 nodes are available", "demo-2": "x"}
    )
    assert condition is not None and (condition.status, condition.reason) == (False, "NotScheduled")
    assert condition.message.startswith(
        "demo-1 and demo-2 are not scheduled (0/1 nodes are available): only demo-0 run"
    )
    nothing_runs = placement.voters_spread({}, {}, {"demo-0": "0/1 nodes are available"})
    assert nothing_runs is not None and "none runs" in nothing_runs.message
