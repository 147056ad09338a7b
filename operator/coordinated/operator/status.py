"""Pure status computation: observations and the planner's decision in, the status subresource out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coordinated.operator.observation import Observation
from coordinated.operator.planner import Action, ActionKind


class Phase:
    PENDING = "Pending"  # nothing runs yet
    FORMING = "Forming"  # pods run, the first bootstrap has not finished
    READY = "Ready"
    SCALING = "Scaling"
    RESTARTING = "Restarting"  # a rolling restart replaces pods on an older template, one at a time
    DEGRADED = "Degraded"  # a master, but not every node is ready or health is not green
    NO_MASTER = "NoMaster"  # a bootstrapped cluster that has lost its master
    PAUSED = "Paused"  # the pause annotation is set: nothing is changed, whatever the spec says
    HIBERNATING = "Hibernating"  # replicas: 0; the pods stop (or stopped), their claims are kept


@dataclass(frozen=True)
class Condition:
    type: str
    status: bool
    reason: str
    message: str


@dataclass(frozen=True)
class Members:
    """What membership.py made of the nodes, for the status: names rather than bare node ids."""

    voting_config: tuple[str, ...] = ()
    nodes: tuple[dict[str, Any], ...] = ()
    quorum_lost: str | None = None


def phase_of(obs: Observation, action: Action) -> str:
    return Phase.PAUSED if obs.paused else _activity_phase(obs, action)


def _activity_phase(obs: Observation, action: Action) -> str:
    cluster = obs.cluster
    if obs.recorded_cluster_uuid is None and not cluster.cluster_uuids:
        return Phase.FORMING if obs.pods else Phase.PENDING
    if obs.desired_replicas == 0:
        return Phase.HIBERNATING
    if obs.hibernated_voters is not None:
        return Phase.SCALING  # waking: the voters start together and elect a master
    if cluster.master is None:
        return Phase.NO_MASTER
    scaling = action.is_scaling or obs.statefulset_replicas != obs.desired_replicas or bool(cluster.exclusions)
    if scaling and action.kind is not ActionKind.REFUSE:
        return Phase.SCALING
    if obs.outdated_pods and action.kind is not ActionKind.REFUSE:
        return Phase.RESTARTING
    wanted = obs.desired_replicas + obs.desired_nonvoters
    all_ready = obs.ready_replicas >= wanted and len(obs.pods) == wanted
    if all_ready and cluster.health in ("green", None) and action.kind is not ActionKind.REFUSE:
        return Phase.READY
    return Phase.DEGRADED


def conditions_of(
    obs: Observation,
    action: Action,
    phase: str,
    problems: Sequence[str],
    error: str | None,
    quorum_lost: str | None = None,
) -> list[Condition]:
    cluster = obs.cluster
    # A paused cluster is still Ready when all its nodes are: pausing changes nothing in the cluster.
    ready = (_activity_phase(obs, action) if phase == Phase.PAUSED else phase) == Phase.READY
    conditions = [
        Condition(
            "Ready",
            ready,
            phase,
            f"{obs.ready_replicas}/{obs.desired_replicas + obs.desired_nonvoters} nodes ready, "
            f"master {cluster.master or 'none'}",
        ),
        Condition(
            "Quorate",
            cluster.master is not None,
            "MasterElected" if cluster.master else ("QuorumLost" if quorum_lost else "NoMaster"),
            f"{cluster.master} is master in term {cluster.term}"
            if cluster.master
            else (quorum_lost or cluster.formation_problem or "no elected master is visible"),
        ),
    ]
    if problems:
        reconciled = Condition("ReconciliationComplete", False, "InvalidSpec", "; ".join(problems))
    elif error:
        reconciled = Condition("ReconciliationComplete", False, "Error", error)
    elif action.kind is ActionKind.NONE:
        reconciled = Condition("ReconciliationComplete", True, "Converged", action.reason)
    else:
        reconciled = Condition("ReconciliationComplete", False, action.kind.value, action.reason)
    conditions.append(reconciled)
    uuids = set(cluster.cluster_uuids) | ({obs.recorded_cluster_uuid} if obs.recorded_cluster_uuid else set())
    conditions.append(
        Condition(
            "ClusterUUIDMismatch",
            len(uuids) > 1,
            "MultipleClusterUUIDs" if len(uuids) > 1 else "SingleClusterUUID",
            f"cluster UUIDs seen: {', '.join(sorted(uuids)) or 'none yet'}",
        )
    )
    conditions.append(
        Condition(
            "Paused",
            obs.paused,
            "PausedByAnnotation" if obs.paused else "NotPaused",
            "reconciliation is paused; remove the coordinated.dev/pause annotation to resume"
            if obs.paused
            else "reconciliation is active",
        )
    )
    even = obs.desired_replicas > 0 and obs.desired_replicas % 2 == 0  # 0: hibernating
    conditions.append(
        Condition(
            "EvenReplicas",
            even,
            "EvenReplicaCount" if even else "OddReplicaCount",
            f"{obs.desired_replicas} master-eligible nodes: the voting configuration keeps an odd number of "
            f"them, so the last one adds no fault tolerance; {obs.desired_replicas - 1} or "
            f"{obs.desired_replicas + 1} nodes tolerate as many or more failures"
            if even
            else f"{obs.desired_replicas} master-eligible nodes tolerate {(obs.desired_replicas - 1) // 2} failure(s)"
            if obs.desired_replicas
            else "no master-eligible node is asked for (hibernating)",
        )
    )
    if adopted := obs.adopted_claims or action.adopted_claims:
        conditions.append(
            Condition(
                "ExistingDataAdopted",
                True,
                "RetainedClaims",
                f"the claims {', '.join(adopted)} existed when this cluster was created and were "
                "adopted with their data (the earlier cluster's UUID and state)",
            )
        )
    return conditions


def _condition_dicts(
    conditions: Sequence[Condition], previous: Sequence[Mapping[str, Any]], now: str, generation: int
) -> list[dict[str, Any]]:
    """Keeps lastTransitionTime when a condition's status did not change, as Kubernetes conventions ask."""
    before = {entry.get("type"): entry for entry in previous}
    result = []
    for condition in conditions:
        status = "True" if condition.status else "False"
        old = before.get(condition.type)
        since = old.get("lastTransitionTime") if old and old.get("status") == status else None
        result.append(
            {
                "type": condition.type,
                "status": status,
                "reason": condition.reason,
                "message": condition.message[:1024],
                "lastTransitionTime": since or now,
                "observedGeneration": generation,
            }
        )
    return result


def compute_status(
    obs: Observation,
    action: Action,
    *,
    generation: int,
    selector: str,
    previous: Mapping[str, Any] | None,
    now: str,
    problems: Sequence[str] = (),
    error: str | None = None,
    extra_conditions: Sequence[Condition] = (),
    members: Members | None = None,
) -> dict[str, Any]:
    previous = previous or {}
    cluster = obs.cluster
    phase = phase_of(obs, action)
    quorum_lost = members.quorum_lost if members else None
    conditions = [*conditions_of(obs, action, phase, problems, error, quorum_lost), *extra_conditions]
    uuid = obs.recorded_cluster_uuid or action.cluster_uuid or previous.get("clusterUUID")
    return {
        "phase": phase,
        "master": cluster.master,
        "term": cluster.term or previous.get("term"),
        "version": cluster.version or previous.get("version"),
        "clusterUUID": uuid,
        "health": cluster.health or "unknown",
        "votingConfig": list(members.voting_config) if members else sorted(cluster.voters),
        "voters": len(cluster.voters),
        "nonVoters": len(cluster.nonvoting_members),
        "nodes": list(members.nodes) if members else [],
        "exclusions": sorted(cluster.exclusions),
        "replicas": len(obs.pods),
        "readyReplicas": obs.ready_replicas,
        "selector": selector,
        "lastAction": {"kind": action.kind.value, "reason": action.reason},
        "observedGeneration": generation,
        "conditions": _condition_dicts(conditions, previous.get("conditions") or (), now, generation),
    }


def election_event(previous: Mapping[str, Any] | None, obs: Observation) -> str | None:
    """A message when a master or term change became visible since the last status, else None."""
    previous = previous or {}
    master, term = obs.cluster.master, obs.cluster.term
    if master and (master != previous.get("master") or term != previous.get("term")):
        return f"{master} is master in term {term}"
    return None
