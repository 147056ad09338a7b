"""The cluster's members as the status reports them, and the non-voters' pool. Pure: observations in.

- **Non-voters** (`spec.votingReplicas`): the StatefulSet `NAME-nonvoter` is set to its size in one step, up
  only while a master is elected (a node joins through it), down at once. They never vote, so neither way
  touches the voting configuration, and the voters' planner (planner.py) never waits for them.
- **Replaced members.** A voter whose volume was lost comes back, in the same pod, as a new node with a new id.
  The master puts the new node in the voting configuration in place of the old id once it has joined
  (Elasticsearch's reconfiguration, no human action). Until then the old id still counts as a voter that
  never answers: `status.nodes[].replacing` names it, the `MemberReplacement` condition says what happens,
  and Events mark the start and the end.
- **A quorum lost for good.** When the lost voters are a majority of the voting configuration, no master
  can ever be elected again: the status says so and points to the recovery procedure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coordinated.operator.observation import Observation, PodObservation, StatefulSetObservation
from coordinated.operator.status import Condition

REPLACEMENT_CONDITION = "MemberReplacement"
RECOVERY_DOC = "docs/operator.md, Recovering from quorum loss"


def nonvoter_replicas(obs: Observation) -> int | None:
    """The non-voters' StatefulSet size after this pass; None when there is none and none is wanted."""
    wanted, current = obs.desired_nonvoters, obs.nonvoter_statefulset_replicas
    if current is None and wanted == 0:
        return None
    current = current or 0
    if wanted <= current:
        return wanted  # fewer at once: a non-voter holds no vote (and hibernation stops them all)
    if obs.recorded_cluster_uuid is None or obs.cluster.master is None or obs.hibernated_voters is not None:
        return current  # more only once there is a master to join (and the voters woke)
    return wanted


@dataclass(frozen=True)
class Layout:
    """What this pass writes into the StatefulSets besides the planner's voter count."""

    claim_size: str  # the voters' claim template
    nonvoters: NonVoterLayout | None = None  # None: no non-voters' StatefulSet is wanted or there


@dataclass(frozen=True)
class NonVoterLayout:
    replicas: int
    claim_size: str
    deleting: bool = False


def nonvoter_layout(
    obs: Observation, statefulset: StatefulSetObservation | None, claim_size: str
) -> NonVoterLayout | None:
    """The non-voters' StatefulSet this pass writes; None when none is wanted and none exists."""
    replicas = nonvoter_replicas(obs)
    if replicas is None or (replicas == 0 and statefulset is None):
        return None
    deleting = statefulset is not None and statefulset.deleting
    return NonVoterLayout(replicas, claim_size, deleting)


@dataclass(frozen=True)
class Replacement:
    """A voting-configuration entry whose pod now runs another node: its data was lost."""

    pod: str
    old_id: str
    new_id: str


def _previous_ids(previous_nodes: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """node id -> pod name, from the last status: each pod's node, and the lost node it was replacing.

    The lost node must stay tied to its pod: once the status shows the pod's new id, the survivor's state may
    no longer name the old one, and without it a later pass with no master could not count it as lost.
    """
    ids = {str(entry["replacing"]): str(entry["name"]) for entry in previous_nodes if entry.get("replacing")}
    return ids | {str(entry["nodeId"]): str(entry["name"]) for entry in previous_nodes if entry.get("nodeId")}


def replacements(obs: Observation, previous_nodes: Sequence[Mapping[str, Any]]) -> list[Replacement]:
    """Voters in the committed configuration whose pod reports another node id now."""
    names = {**_previous_ids(previous_nodes), **obs.cluster.names_by_id}
    found = []
    for old_id in sorted(obs.cluster.voter_ids):
        pod = names.get(old_id)
        new_id = obs.cluster.node_ids.get(pod) if pod else None
        if pod is not None and new_id is not None and new_id != old_id:
            found.append(Replacement(pod, old_id, new_id))
    return found


def replaced_between_passes(
    obs: Observation, replaced: Sequence[Replacement], previous_nodes: Sequence[Mapping[str, Any]]
) -> list[Replacement]:
    """Voters that lost their data and were already replaced when this pass first saw their new id.

    The master swaps the ids as soon as the new node joins, which can fall between two passes of a busy
    operator: the last status shows the pod voting with its old id, this pass shows a new id that the
    old one no longer stands beside in the voting configuration.
    """
    current = {r.pod for r in replaced}
    found = []
    for entry in previous_nodes:
        pod, old_id = str(entry.get("name")), entry.get("nodeId")
        new_id = obs.cluster.node_ids.get(pod)
        if (
            pod not in current
            and old_id
            and entry.get("voting")
            and not entry.get("replacing")
            and new_id is not None
            and new_id != old_id
            and old_id not in obs.cluster.voter_ids
        ):
            found.append(Replacement(pod, str(old_id), new_id))
    return sorted(found, key=lambda r: r.pod)


def quorum_lost(obs: Observation, replaced: Sequence[Replacement]) -> str | None:
    """Why no master can ever be elected again, or None: the voters that lost their data are a majority."""
    voters = obs.cluster.voter_ids
    if obs.cluster.master is not None or not voters or not replaced:
        return None
    lost = {replacement.old_id for replacement in replaced}
    if (len(voters) - len(lost & voters)) * 2 > len(voters):
        return None
    pods = ", ".join(f"{r.pod} (node {r.old_id}, now {r.new_id})" for r in replaced)
    return (
        f"the quorum is lost for good: {len(lost & voters)} of the {len(voters)} voters lost their data and came "
        f"back as new nodes ({pods}), so no master can be elected again. Recover from a surviving node with "
        f"`coordinated node-tool unsafe-bootstrap` ({RECOVERY_DOC}); it can lose acknowledged writes"
    )


def replacement_condition(
    replaced: Sequence[Replacement], previous: Mapping[str, Any] | None, finished: Sequence[Replacement] = ()
) -> Condition:
    """`finished`: replacements that began and ended between two passes (replaced_between_passes)."""
    if replaced:
        parts = [
            f"{r.pod} lost its data and runs as new node {r.new_id}; the voting configuration still holds its "
            f"old node {r.old_id}, which the master replaces with {r.new_id} once it has joined"
            for r in replaced
        ]
        return Condition(REPLACEMENT_CONDITION, True, "Replacing", "; ".join(parts))
    if finished or (previous is not None and previous.get("status") == "True"):
        return Condition(REPLACEMENT_CONDITION, False, "Replaced", "every lost member was replaced")
    return Condition(
        REPLACEMENT_CONDITION,
        False,
        str((previous or {}).get("reason") or "NoneLost"),
        str((previous or {}).get("message") or "no member has lost its data"),
    )


def replacement_events(
    replaced: Sequence[Replacement],
    previous_nodes: Sequence[Mapping[str, Any]],
    obs: Observation,
    finished: Sequence[Replacement] = (),
) -> list[tuple[str, str, str]]:
    """One Event when a replacement is first seen, one when the old id has left the voting configuration.

    `finished` (replaced_between_passes) gets both at once: no replacement goes unannounced.
    """
    before = {str(entry.get("name")): entry for entry in previous_nodes}
    events = []
    for r in finished:
        voting = r.new_id in obs.cluster.voter_ids
        events.append(
            (
                "Warning",
                "ReplacingMember",
                f"{r.pod} came back without its data, as new node {r.new_id}; the master has already replaced "
                f"its old node {r.old_id} in the voting configuration",
            )
        )
        events.append(
            (
                "Normal",
                "MemberReplaced",
                f"{r.pod}'s lost node {r.old_id} left the voting configuration"
                + (f"; {r.pod} votes again as node {r.new_id}" if voting else ""),
            )
        )
    for r in replaced:
        if before.get(r.pod, {}).get("replacing") != r.old_id:
            events.append(
                (
                    "Warning",
                    "ReplacingMember",
                    f"{r.pod} came back without its data, as new node {r.new_id}; its old node {r.old_id} stays "
                    f"in the voting configuration until the master replaces it with {r.new_id}",
                )
            )
    current = {r.pod for r in replaced}
    for pod, entry in sorted(before.items()):
        old_id = entry.get("replacing")
        if old_id and pod not in current and old_id not in obs.cluster.voter_ids:
            new_id = obs.cluster.node_ids.get(pod) or entry.get("nodeId")
            voting = new_id in obs.cluster.voter_ids
            events.append(
                (
                    "Normal",
                    "MemberReplaced",
                    f"{pod}'s lost node {old_id} left the voting configuration"
                    + (f"; {pod} votes again as node {new_id}" if voting else ""),
                )
            )
    return events


def voting_config_names(
    obs: Observation, replaced: Sequence[Replacement], previous_nodes: Sequence[Mapping[str, Any]]
) -> list[str]:
    """The committed voting configuration by pod name; a lost node's entry says so."""
    names = {**_previous_ids(previous_nodes), **obs.cluster.names_by_id}
    lost = {r.old_id: r.pod for r in replaced}
    entries = []
    for node_id in sorted(obs.cluster.voter_ids):
        if node_id in lost:
            entries.append(f"{lost[node_id]} (lost node {node_id})")
        else:
            entries.append(names.get(node_id, node_id))
    return sorted(entries)


def _order(pod: PodObservation) -> tuple[bool, int, str]:
    number = pod.name.rsplit("-", 1)[-1]
    return (not pod.voting, int(number) if number.isdigit() else 0, pod.name)


def _awaited_voters(obs: Observation, previous_nodes: Sequence[Mapping[str, Any]]) -> list[PodObservation]:
    """Voter pods in the last status that do not exist now, but that the StatefulSet creates again and whose
    node still counts in the voting configuration.

    Their entry (with the node id last reported) is the only record that ties that id to the pod: the
    master's state drops a node's name once it leaves. Dropped from status.nodes for one pass, a voter that
    comes back without its data would be swapped for its new id unannounced.
    """
    size = obs.statefulset_replicas or 0
    return [
        PodObservation(name, ready=False)
        for entry in previous_nodes
        if (name := str(entry.get("name"))) not in obs.pods
        and entry.get("nodeId") in obs.cluster.voter_ids
        and (ordinal := obs.ordinal(name)) is not None
        and ordinal < size
    ]


def node_entries(
    obs: Observation,
    replaced: Sequence[Replacement],
    zones: Mapping[str, str | None],
    previous_nodes: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """status.nodes: one entry per pod, voters first, in ordinal order.

    A pod whose sidecar does not answer now keeps the node id it last reported: a voter that comes back
    without its data is then still seen as the same pod with a new id, however long it was down. So does a
    voter whose pod does not exist for a moment (deleted, not yet created again): see _awaited_voters.
    """
    replacing = {r.pod: r.old_id for r in replaced}
    last_ids = {str(entry.get("name")): entry.get("nodeId") for entry in previous_nodes if entry.get("nodeId")}
    entries = []
    for pod in sorted([*obs.pods.values(), *_awaited_voters(obs, previous_nodes)], key=_order):
        node_id = obs.cluster.node_ids.get(pod.name) or last_ids.get(pod.name)
        entries.append(
            {
                "name": pod.name,
                "nodeId": node_id,
                "role": "voter" if pod.voting else "nonvoter",
                "voting": node_id is not None and node_id in obs.cluster.voter_ids,
                "ready": pod.ready and not pod.terminating,
                "image": pod.image,
                "kubernetesNode": pod.node_name,
                "zone": zones.get(pod.node_name) if pod.node_name else None,
                "replacing": replacing.get(pod.name),
            }
        )
    return entries
