"""Status computation: phase, conditions (with stable transition times) and election events."""

from __future__ import annotations

from dataclasses import replace

from test_operator_planner import UUID, healthy, with_cluster

from coordinated.operator.observation import ClusterView, Observation, PodObservation
from coordinated.operator.planner import Action, ActionKind, plan
from coordinated.operator.status import Phase, compute_status, election_event, phase_of

NOW = "2026-01-01T00:00:00Z"


def status_of(obs: Observation, previous: dict | None = None, **kwargs: object) -> dict:
    return compute_status(obs, plan(obs), generation=4, selector="a=b", previous=previous, now=NOW, **kwargs)  # type: ignore[arg-type]


def conditions(status: dict) -> dict[str, dict]:
    return {condition["type"]: condition for condition in status["conditions"]}


def test_ready_cluster() -> None:
    status = status_of(healthy(3, 3))
    assert status["phase"] == Phase.READY
    assert status["master"] == "c-0" and status["term"] == 3 and status["version"] == 10
    assert status["clusterUUID"] == UUID
    assert status["votingConfig"] == ["c-0", "c-1", "c-2"]
    assert status["voters"] == 3
    assert (status["replicas"], status["readyReplicas"]) == (3, 3)
    assert status["observedGeneration"] == 4 and status["selector"] == "a=b"
    found = conditions(status)
    assert found["Ready"]["status"] == "True"
    assert found["Quorate"]["status"] == "True"
    assert found["ReconciliationComplete"]["status"] == "True"
    assert found["ClusterUUIDMismatch"]["status"] == "False"
    assert found["Paused"]["status"] == "False"


def test_phases() -> None:
    assert phase_of(Observation("c", 3, None), plan(Observation("c", 3, None))) == Phase.PENDING
    forming = Observation("c", 3, 3, pods={"c-0": PodObservation("c-0")}, pinned_initial_master_nodes=("c-0",))
    assert phase_of(forming, plan(forming)) == Phase.FORMING
    no_master = with_cluster(healthy(3, 3), master=None)
    assert status_of(no_master)["phase"] == Phase.NO_MASTER
    assert conditions(status_of(no_master))["Quorate"]["status"] == "False"
    assert status_of(healthy(3, 5))["phase"] == Phase.SCALING
    degraded = replace(healthy(3, 3), pods={**healthy(3, 3).pods, "c-1": PodObservation("c-1", ready=False)})
    assert status_of(degraded)["phase"] == Phase.DEGRADED
    yellow = with_cluster(healthy(3, 3), health="yellow")
    assert status_of(yellow)["phase"] == Phase.DEGRADED


def test_refused_scale_down_is_degraded_and_explained() -> None:
    obs = with_cluster(healthy(3, 2), master=None)
    status = status_of(obs)
    reconcile = conditions(status)["ReconciliationComplete"]
    assert reconcile["status"] == "False" and reconcile["reason"] == "Refuse"
    assert "no elected master" in reconcile["message"]


def test_uuid_mismatch_condition() -> None:
    obs = with_cluster(healthy(3, 3), cluster_uuids=frozenset({UUID, "other"}))
    found = conditions(status_of(obs))
    assert found["ClusterUUIDMismatch"]["status"] == "True"
    assert "other" in found["ClusterUUIDMismatch"]["message"]


def test_invalid_settings_and_pause_conditions() -> None:
    status = status_of(healthy(3, 3, paused=True), problems=["unknown setting [x]"])
    found = conditions(status)
    assert found["ReconciliationComplete"]["reason"] == "InvalidSpec"
    assert "unknown setting [x]" in found["ReconciliationComplete"]["message"]
    assert found["Paused"]["status"] == "True"


def test_transition_time_is_kept_while_status_is_unchanged() -> None:
    first = status_of(healthy(3, 3))
    later = compute_status(
        healthy(3, 3), plan(healthy(3, 3)), generation=4, selector="", previous=first, now="2026-01-02T00:00:00Z"
    )
    assert conditions(later)["Ready"]["lastTransitionTime"] == NOW
    flipped = compute_status(
        with_cluster(healthy(3, 3), master=None),
        Action(ActionKind.NONE, "", 3),
        generation=4,
        selector="",
        previous=first,
        now="2026-01-03T00:00:00Z",
    )
    assert conditions(flipped)["Quorate"]["lastTransitionTime"] == "2026-01-03T00:00:00Z"


def test_election_events() -> None:
    obs = healthy(3, 3)
    assert election_event({}, obs) == "c-0 is master in term 3"
    assert election_event({"master": "c-0", "term": 3}, obs) is None
    assert election_event({"master": "c-0", "term": 2}, obs) == "c-0 is master in term 3"
    assert election_event({"master": "c-0", "term": 3}, replace(obs, cluster=ClusterView())) is None


def test_a_paused_cluster_shows_paused_not_scaling() -> None:
    # Asked for 5 while paused: nothing moves, and the phase says why.
    paused = replace(healthy(3, 5), paused=True)
    status = status_of(paused)
    assert status["phase"] == Phase.PAUSED
    assert conditions(status)["Paused"]["status"] == "True"
    # Pausing a healthy cluster does not make it unready.
    assert conditions(status_of(replace(healthy(3, 3), paused=True)))["Ready"]["status"] == "True"


def test_an_even_replica_count_raises_a_warning_condition() -> None:
    even = conditions(status_of(healthy(4, 4)))["EvenReplicas"]
    assert even["status"] == "True" and even["reason"] == "EvenReplicaCount"
    assert "3 or 5 nodes" in even["message"]
    assert conditions(status_of(healthy(3, 3)))["EvenReplicas"]["status"] == "False"


def test_adopted_claims_are_reported_in_a_condition() -> None:
    assert "ExistingDataAdopted" not in conditions(status_of(healthy(3, 3)))
    adopted = replace(healthy(3, 3), adopted_claims=("data-c-0", "data-c-1"))
    condition = conditions(status_of(adopted))["ExistingDataAdopted"]
    assert condition["status"] == "True" and "data-c-0, data-c-1" in condition["message"]
