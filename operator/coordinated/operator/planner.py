"""The scaling and bootstrap planner: an Observation in, the single next safe Action out.

Pure and deterministic. Every decision is re-derived from what can be observed (the StatefulSet, the
pods, the sidecars' cluster state, the annotations on the CoordinatedCluster), so the operator can stop
after any step and resume. At most one master-eligible node is added or removed per step.

Scale-down of one node, as in Elasticsearch's Zen2 (and ECK):
  1. exclude the highest-ordinal node from voting;  2. wait until it left the committed configuration;
  3. lower the StatefulSet by one;  4. wait until the pod is gone;  5. clear the exclusions.

Rolling restart (the StatefulSet is OnDelete, so only the operator replaces pods): once the cluster has
its requested size, each pod still on an older template is deleted in turn, highest ordinal first and the
master last (one election in all), and only while the cluster is green, every node has joined and the
voting configuration is intact (committed = accepted, no exclusions, every voter live).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from coordinated.operator.observation import Observation


class ActionKind(enum.Enum):
    PIN_BOOTSTRAP = "PinBootstrap"  # record cluster.initial_master_nodes in an annotation, once
    COMPLETE_BOOTSTRAP = "CompleteBootstrap"  # record the cluster UUID, drop the bootstrap list
    SET_REPLICAS = "SetReplicas"  # create or resize the StatefulSet
    EXCLUDE = "ExcludeFromVoting"  # POST a voting-config exclusion for one node
    CLEAR_EXCLUSIONS = "ClearExclusions"  # DELETE the voting-config exclusions
    RESTART = "RestartPod"  # delete one pod on an older template; the StatefulSet recreates it
    BLOCK_ROLLOUT = "BlockRollout"  # a new pod cannot be scheduled: go back to the template that ran
    HIBERNATE = "Hibernate"  # record how many voters sleep, and stop every pod (their claims are kept)
    WAKE = "Wake"  # the hibernated voters rejoined: forget the hibernation
    WAIT = "Wait"  # a step is under way; check again later
    REFUSE = "Refuse"  # the requested change is unsafe now; nothing is done
    NONE = "None"  # converged


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    reason: str
    statefulset_replicas: int | None  # what the StatefulSet must say after this step (None: no StatefulSet)
    nodes: tuple[str, ...] = ()  # the nodes an exclusion or bootstrap list names
    cluster_uuid: str | None = None
    wait_for_removal: bool = False
    adopted_claims: tuple[str, ...] = ()  # PIN_BOOTSTRAP: data claims retained from an earlier cluster
    hibernated_voters: int | None = None  # HIBERNATE: the voters' StatefulSet size that goes to sleep
    revision: str | None = None  # BLOCK_ROLLOUT: the StatefulSet revision (the template) to go back to

    @property
    def changes_something(self) -> bool:
        return self.kind not in (ActionKind.WAIT, ActionKind.REFUSE, ActionKind.NONE)

    @property
    def is_scaling(self) -> bool:
        return self.kind in (
            ActionKind.SET_REPLICAS,
            ActionKind.EXCLUDE,
            ActionKind.CLEAR_EXCLUSIONS,
            ActionKind.HIBERNATE,
            ActionKind.WAKE,
        )


PAUSED_REASON = "reconciliation is paused by annotation"


def _hold(kind: ActionKind, reason: str, obs: Observation) -> Action:
    return Action(kind, reason, obs.statefulset_replicas)


def _names(nodes: Iterable[str]) -> str:
    return ", ".join(sorted(nodes))


def plan(obs: Observation) -> Action:
    current = obs.statefulset_replicas
    desired = obs.desired_replicas
    cluster = obs.cluster

    if obs.paused:
        return _hold(ActionKind.WAIT, PAUSED_REASON, obs)
    if desired < 0:
        return _hold(ActionKind.REFUSE, f"replicas must be at least 0, got {desired}", obs)

    # Identity first: two cluster UUIDs means a split or a second bootstrap; touch nothing.
    foreign = cluster.cluster_uuids - {obs.recorded_cluster_uuid} if obs.recorded_cluster_uuid else set()
    if len(cluster.cluster_uuids) > 1 or foreign:
        seen = _names(cluster.cluster_uuids)
        return _hold(ActionKind.REFUSE, f"nodes report different cluster UUIDs ({seen}); not scaling", obs)

    if obs.recorded_cluster_uuid is None:
        if desired == 0:
            return _hold(ActionKind.WAIT, "replicas is 0: no node is started until replicas is raised", obs)
        return _plan_bootstrap(obs)

    if obs.statefulset_deleting:
        return _hold(ActionKind.WAIT, "waiting for the StatefulSet to be deleted, to create it again", obs)
    if current is None:
        # The StatefulSet was deleted under a bootstrapped cluster (by hand, or orphaning its pods to change its
        # claim template): recreate it without a bootstrap list, at the size its pods have, so that it adopts
        # them as they are; scaling then goes on one node at a time.
        running = [ordinal for name in obs.pods if (ordinal := obs.ordinal(name)) is not None]
        size = max(running) + 1 if running else (0 if obs.hibernated_voters is not None else desired)
        return Action(ActionKind.SET_REPLICAS, "recreating the StatefulSet of a bootstrapped cluster", size)
    if desired == 0:
        return _plan_hibernation(obs, current)
    if obs.hibernated_voters is not None:
        return _plan_wake(obs, current, obs.hibernated_voters)

    # Finish or cancel earlier scale-down steps before anything new.
    victim = obs.pod_name(current - 1) if desired < current else None
    removed = {node for node in cluster.exclusions if (obs.ordinal(node) or 0) >= current}
    stale = cluster.exclusions - removed - {victim}
    if removed:
        lingering = {node for node in removed if node in obs.pods or node in cluster.members}
        if lingering:
            return _hold(ActionKind.WAIT, f"waiting for removed node(s) {_names(lingering)} to leave", obs)
        return Action(
            ActionKind.CLEAR_EXCLUSIONS,
            f"node(s) {_names(removed)} left the cluster; clearing the voting exclusions",
            current,
            nodes=tuple(sorted(cluster.exclusions)),
            wait_for_removal=not stale,
        )
    if stale:
        # An exclusion for a node that stays (a scale-down was cancelled): give it its vote back.
        return Action(
            ActionKind.CLEAR_EXCLUSIONS,
            f"node(s) {_names(stale)} are no longer being removed; clearing the voting exclusions",
            current,
            nodes=tuple(sorted(cluster.exclusions)),
            wait_for_removal=False,
        )

    # Pods on a template no longer wanted that cannot become Ready on it go at once: neither scaling nor the roll
    # may wait for them (a revert of an unschedulable template would wait forever).
    if stuck := obs.stuck_outdated_pods:
        return Action(
            ActionKind.RESTART,
            f"replacing {_names(stuck)} at once: not running on a pod template that is no longer wanted",
            current,
            nodes=stuck,
        )
    if desired > current:
        return _plan_scale_up(obs, current)
    if victim is not None:
        return _plan_scale_down(obs, current, victim)
    if blocked := obs.blocked_roll():
        pod, message, revision = blocked
        return Action(
            ActionKind.BLOCK_ROLLOUT,
            f"rolling restart stopped: {pod} could not be scheduled for {_seconds(obs.unschedulable_timeout)} on the "
            f"new pod template ({message}); it goes back to the template that ran ({revision})",
            current,
            nodes=(pod,),
            revision=revision,
        )
    if obs.outdated_pods:
        return _plan_restart(obs, current)
    if obs.rollout_blocked is not None:
        return _hold(
            ActionKind.WAIT,
            f"rolling restart stopped: the pods run the template that ran before ({obs.rollout_blocked}), as the "
            "new one could not be scheduled; change the spec (or revert it) to go on",
            obs,
        )
    return _hold(ActionKind.NONE, f"{current} node(s), as requested", obs)


def _seconds(value: float) -> str:
    return f"{value:.0f}s" if value < 120 else f"{value / 60:.0f}m"


def _plan_hibernation(obs: Observation, current: int) -> Action:
    """replicas: 0. Every voter stops at once (no exclusions: the voting configuration sleeps as it is, and wakes
    as it was), after a snapshot when the cluster has a snapshot volume; the claims are kept."""
    asleep = obs.hibernated_voters
    if asleep is None:
        if obs.snapshot_before_hibernation:
            if obs.cluster.master is None:
                return _hold(
                    ActionKind.REFUSE,
                    "not hibernating: the snapshot taken before hibernating needs an elected master",
                    obs,
                )
            return _hold(ActionKind.WAIT, "hibernating: taking a snapshot first", obs)
        return Action(
            ActionKind.HIBERNATE,
            f"hibernating: stopping all {current} node(s); their claims are kept, and raising replicas wakes them",
            0,
            hibernated_voters=current,
        )
    if current > 0:  # recorded, but the StatefulSet was not scaled yet (an operator restart in between)
        return Action(ActionKind.SET_REPLICAS, f"hibernating: stopping all {current} node(s)", 0)
    if obs.pods:
        return _hold(ActionKind.WAIT, f"hibernating: waiting for {_names(obs.pods)} to stop", obs)
    return _hold(
        ActionKind.NONE, f"hibernating: {asleep} node(s) asleep with their claims; raise replicas to wake them", obs
    )


def _plan_wake(obs: Observation, current: int, asleep: int) -> Action:
    """All the hibernated voters start together, as after a full restart: each finds its data and the voting
    configuration it slept with. Only once they rejoined does scaling towards the spec go on."""
    if current < asleep:
        return Action(ActionKind.SET_REPLICAS, f"waking: starting the {asleep} hibernated node(s) together", asleep)
    expected = {obs.pod_name(ordinal) for ordinal in range(asleep)}
    missing = expected - obs.live_members
    if obs.cluster.master is None or missing:
        waiting = _names(missing) if missing else "an elected master"
        return _hold(ActionKind.WAIT, f"waking: waiting for {waiting}", obs)
    return Action(ActionKind.WAKE, f"woke: the {asleep} hibernated node(s) rejoined with their data", current)


def _plan_restart(obs: Observation, current: int) -> Action:
    cluster, outdated = obs.cluster, obs.outdated_pods
    left = f"{len(outdated)} of {current} node(s) still on the previous pod template"
    expected = {obs.pod_name(ordinal) for ordinal in range(current)}
    missing = expected - obs.live_members
    if missing:
        return _hold(ActionKind.WAIT, f"rolling restart: {left}; waiting for {_names(missing)} to rejoin", obs)
    if cluster.master is None or cluster.health != "green":
        health = cluster.health or "unknown"
        return _hold(ActionKind.WAIT, f"rolling restart: {left}; waiting for green health (now {health})", obs)
    if cluster.voters != cluster.accepted_voters or cluster.exclusions or not cluster.voters <= obs.live_members:
        return _hold(ActionKind.WAIT, f"rolling restart: {left}; waiting for the voting configuration to settle", obs)
    # Followers first, highest ordinal first; the master last, so the cluster holds one election in all.
    order = sorted(outdated, key=lambda name: (name == cluster.master, -(obs.ordinal(name) or 0)))
    pod = order[0]
    role = "the master, last" if pod == cluster.master else "a follower"
    return Action(ActionKind.RESTART, f"rolling restart: restarting {pod} ({role}); {left}", current, nodes=(pod,))


def _plan_bootstrap(obs: Observation) -> Action:
    current = obs.statefulset_replicas
    uuids = obs.cluster.cluster_uuids
    if uuids:
        (uuid,) = uuids
        return Action(
            ActionKind.COMPLETE_BOOTSTRAP, f"the cluster bootstrapped with UUID {uuid}", current, cluster_uuid=uuid
        )
    pinned = obs.pinned_initial_master_nodes
    if not pinned:
        if current is not None:
            # Never pin a second bootstrap list for pods that may already hold a cluster's state.
            return _hold(
                ActionKind.WAIT,
                "the StatefulSet exists but no bootstrap list or cluster UUID is recorded; "
                "waiting for a node to report its cluster UUID",
                obs,
            )
        nodes = tuple(obs.pod_name(ordinal) for ordinal in range(obs.desired_replicas))
        if obs.existing_claims:
            # The StatefulSet will mount these claims again: nodes that find a cluster state in them keep
            # it (its UUID, terms and keys) and ignore the bootstrap list, exactly as after a full restart.
            return Action(
                ActionKind.PIN_BOOTSTRAP,
                f"adopting existing data: the claims {_names(obs.existing_claims)} were retained from an "
                "earlier cluster of this name; its nodes keep that cluster's UUID and state "
                "(delete the claims before creating the cluster to start empty)",
                None,
                nodes=nodes,
                adopted_claims=obs.existing_claims,
            )
        return Action(
            ActionKind.PIN_BOOTSTRAP,
            f"bootstrapping a new cluster from {_names(nodes)}",
            None,
            nodes=nodes,
        )
    if current is None or current < len(pinned):
        return Action(
            ActionKind.SET_REPLICAS,
            f"starting the {len(pinned)} initial master-eligible node(s)",
            len(pinned),
        )
    if obs.desired_replicas < current:
        return _hold(
            ActionKind.REFUSE,
            f"cannot scale down to {obs.desired_replicas} before the cluster has bootstrapped: "
            f"the bootstrap needs a majority of {_names(pinned)}",
            obs,
        )
    return _hold(ActionKind.WAIT, f"waiting for the cluster to bootstrap from {_names(pinned)}", obs)


def _plan_scale_up(obs: Observation, current: int) -> Action:
    if obs.cluster.master is None:
        return _hold(ActionKind.WAIT, "waiting for an elected master before adding a node", obs)
    expected = {obs.pod_name(ordinal) for ordinal in range(current)}
    missing = expected - obs.live_members
    if missing:
        return _hold(ActionKind.WAIT, f"waiting for {_names(missing)} to join before adding a node", obs)
    return Action(ActionKind.SET_REPLICAS, f"adding node {obs.pod_name(current)}", current + 1)


def _plan_scale_down(obs: Observation, current: int, victim: str) -> Action:
    cluster = obs.cluster
    if victim in cluster.exclusions:
        if victim in cluster.voters or victim in cluster.accepted_voters:
            return _hold(ActionKind.WAIT, f"waiting for {victim} to leave the voting configuration", obs)
        return Action(ActionKind.SET_REPLICAS, f"removing node {victim}", current - 1)

    # Step 1 is the only step that changes the voting configuration; every check guards it.
    if cluster.master is None:
        return _hold(ActionKind.REFUSE, f"not removing {victim}: the cluster has no elected master", obs)
    expected = {obs.pod_name(ordinal) for ordinal in range(current)}
    missing = expected - obs.live_members
    if missing:
        return _hold(
            ActionKind.REFUSE,
            f"not removing {victim}: {_names(missing)} not live, and removing another node could lose quorum",
            obs,
        )
    live = obs.live_members
    remaining = cluster.voters - {victim}
    if not remaining:
        return _hold(ActionKind.REFUSE, f"not removing {victim}: it is the only voting node", obs)
    if len(cluster.voters & live) * 2 <= len(cluster.voters):
        return _hold(ActionKind.REFUSE, f"not removing {victim}: the voting configuration has no live quorum", obs)
    if len(remaining & live) * 2 <= len(remaining):
        return _hold(
            ActionKind.REFUSE,
            f"not removing {victim}: the remaining voters {_names(remaining)} would have no live quorum",
            obs,
        )
    return Action(
        ActionKind.EXCLUDE,
        f"excluding {victim} from the voting configuration before removing it",
        current,
        nodes=(victim,),
    )
