"""What the operator sees of one CoordinatedCluster, digested into plain values for planner and status.

`summarize_states` turns the per-pod answers of `GET /_cluster/state?local=true` into one view: the
master's own state when some node is master, since followers may lag behind it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from coordinated.operator.sidecar_client import ClusterHealth, ClusterState


@dataclass(frozen=True)
class PodObservation:
    name: str
    ready: bool = False
    terminating: bool = False
    ip: str | None = None
    revision: str | None = None  # the StatefulSet revision the pod was created from (controller-revision-hash)
    voting: bool = True  # a pod of the voters' StatefulSet (else of the non-voters')
    image: str | None = None  # the sidecar container's image
    node_name: str | None = None  # the Kubernetes node it was scheduled to
    unschedulable: str | None = None  # the scheduler's message while it cannot place the pod
    unschedulable_for: float = 0.0  # for how long (seconds) the scheduler has not placed it (PodScheduled False)
    phase: str | None = None  # status.phase: Pending until its containers run


@dataclass(frozen=True)
class StatefulSetObservation:
    """What the operator reads back from one of its StatefulSets (as stored, before this pass applies it)."""

    replicas: int
    update_revision: str | None = None  # status.updateRevision: the revision of the current pod template
    volumes: frozenset[str] = frozenset()  # the pod template's volume names
    claim_size: str | None = None  # the data claim template's storage request
    when_scaled: str | None = None  # persistentVolumeClaimRetentionPolicy.whenScaled
    deleting: bool = False  # a deletion (for example an orphaning one, to change the claim template) is under way


@dataclass(frozen=True)
class ClaimObservation:
    """One data claim as stored: what it asks for and what it has."""

    name: str
    requested: str | None = None  # spec.resources.requests.storage
    capacity: str | None = None  # status.capacity.storage (None while unbound)
    storage_class: str | None = None
    problem: str | None = None  # a resize failure the claim reports (its conditions)


@dataclass(frozen=True)
class ClusterView:
    """The cluster as the sidecars report it; empty when no sidecar answered."""

    reachable: frozenset[str] = frozenset()  # pods whose sidecar answered
    cluster_uuids: frozenset[str] = frozenset()  # every UUID any node reported
    cluster_name: str | None = None
    master: str | None = None
    term: int = 0
    version: int = 0
    members: frozenset[str] = frozenset()  # nodes in the master's state (joined)
    voters: frozenset[str] = frozenset()  # last committed voting configuration
    accepted_voters: frozenset[str] = frozenset()  # last accepted voting configuration
    exclusions: frozenset[str] = frozenset()
    health: str | None = None  # green, yellow, red; None when unknown
    formation_problem: str | None = None
    voter_ids: frozenset[str] = frozenset()  # the committed voting configuration, as node ids
    nonvoting_members: frozenset[str] = frozenset()  # joined nodes without the master role
    node_ids: Mapping[str, str] = field(default_factory=dict)  # pod -> the node id its sidecar reports now
    names_by_id: Mapping[str, str] = field(default_factory=dict)  # every node id any state names -> its name


@dataclass(frozen=True)
class Observation:
    """Everything the planner may base a decision on; all of it can be re-read after a restart."""

    statefulset_name: str
    desired_replicas: int  # voting nodes (0: hibernate)
    statefulset_replicas: int | None  # None: the StatefulSet does not exist
    pods: Mapping[str, PodObservation] = field(default_factory=dict)
    cluster: ClusterView = ClusterView()
    pinned_initial_master_nodes: tuple[str, ...] = ()
    recorded_cluster_uuid: str | None = None
    paused: bool = False
    # Data claims of this cluster's pods that exist before its first bootstrap: retained from an earlier
    # CoordinatedCluster of the same name. Only looked up until the bootstrap list is pinned.
    existing_claims: tuple[str, ...] = ()
    # The claims the cluster adopted at creation, as recorded in an annotation.
    adopted_claims: tuple[str, ...] = ()
    # The StatefulSet's status.updateRevision: pods of another revision still run an older pod template.
    update_revision: str | None = None
    # The StatefulSet is being deleted (orphaning its pods), to come back with a larger claim template.
    statefulset_deleting: bool = False
    desired_nonvoters: int = 0
    nonvoter_statefulset_replicas: int | None = None  # None: no non-voters' StatefulSet
    nonvoter_update_revision: str | None = None  # the non-voters' StatefulSet's status.updateRevision
    # Hibernation: the voters' StatefulSet size when the cluster went to sleep (an annotation), and whether a
    # snapshot must still be taken before it does (a snapshot volume, and none taken yet).
    hibernated_voters: int | None = None
    snapshot_before_hibernation: bool = False
    # A rolling restart stopped (RolloutBlocked) for the pod template the spec asks for now: the StatefulSet went
    # back to this revision, the last template that ran. None: the roll may proceed.
    rollout_blocked: str | None = None
    # How long a pod of the new template may stay unschedulable before it stops the roll (spec.rollout).
    unschedulable_timeout: float = 300.0

    def pod_name(self, ordinal: int) -> str:
        return f"{self.statefulset_name}-{ordinal}"

    def ordinal(self, node_name: str) -> int | None:
        prefix, _, number = node_name.rpartition("-")
        return int(number) if prefix == self.statefulset_name and number.isdigit() else None

    @property
    def live_members(self) -> frozenset[str]:
        """Nodes the master counts as joined whose pods exist, are ready and are not going away."""
        return frozenset(
            name
            for name in self.cluster.members
            if (pod := self.pods.get(name)) is not None and pod.ready and not pod.terminating
        )

    @property
    def voter_pods(self) -> dict[str, PodObservation]:
        return {name: pod for name, pod in self.pods.items() if pod.voting}

    @property
    def outdated_pods(self) -> tuple[str, ...]:
        """Pods (within the StatefulSet's size) created from an older pod template than the current one."""
        if not self.update_revision:
            return ()
        size = self.statefulset_replicas or 0
        return tuple(
            sorted(
                name
                for name, pod in self.pods.items()
                if pod.revision
                and pod.revision != self.update_revision
                and (ordinal := self.ordinal(name)) is not None
                and ordinal < size
            )
        )

    @property
    def stuck_outdated_pods(self) -> tuple[str, ...]:
        """Voters on an older template than the one wanted that cannot become Ready on it: not scheduled, or not
        running a sidecar that answers. They hold nothing the cluster needs (a process that answers, even without
        a master, is never one of them), and waiting for them would block the change that replaces them: a
        revert of a template that could not be scheduled would wait for the pods that cannot be."""
        # The non-voters too: their StatefulSet rolls them itself, but waits, as a StatefulSet does, for a pod
        # that cannot become Ready (Kubernetes' "forced rollback" is by hand); and they hold no vote.
        nonvoters = tuple(
            name
            for name, pod in self.pods.items()
            if not pod.voting and pod.revision and self.nonvoter_update_revision
            and pod.revision != self.nonvoter_update_revision
        )  # fmt: skip
        return tuple(
            name
            for name in (*self.outdated_pods, *sorted(nonvoters))
            if not (pod := self.pods[name]).ready
            and not pod.terminating
            and (pod.unschedulable is not None or name not in self.cluster.reachable)
        )

    def blocked_roll(self) -> tuple[str, str, str] | None:
        """(pod, the scheduler's message, the revision to go back to) when a pod of the current template has been
        unschedulable for `unschedulable_timeout` while live members still run an older template: the roll cannot
        go on, and the pod goes back to the template that ran. None otherwise (also once the roll went back)."""
        if self.rollout_blocked is not None or not self.update_revision:
            return None
        older = Counter(
            pod.revision
            for name, pod in self.voter_pods.items()
            if name in self.live_members and pod.revision and pod.revision != self.update_revision
        )
        if not older:
            return None
        for name, pod in sorted(self.voter_pods.items()):
            if (
                pod.revision == self.update_revision
                and pod.unschedulable is not None
                and pod.unschedulable_for >= self.unschedulable_timeout
            ):
                return name, pod.unschedulable, older.most_common(1)[0][0]
        return None

    @property
    def ready_replicas(self) -> int:
        return sum(1 for pod in self.pods.values() if pod.ready and not pod.terminating)


def summarize_states(
    states: Mapping[str, ClusterState],
    health: ClusterHealth | None = None,
    node_ids: Mapping[str, str] | None = None,
) -> ClusterView:
    """`node_ids`: pod -> the node id its sidecar reported for itself."""
    if not states:
        return ClusterView(node_ids=dict(node_ids or {}))
    uuids = frozenset(state.cluster_uuid for state in states.values() if state.cluster_uuid)
    # A node whose own state names itself as master speaks for the cluster; prefer the newest such.
    masters = [state for pod, state in states.items() if state.master == pod]
    candidates = masters or [state for state in states.values() if state.master]
    best = max(candidates or states.values(), key=lambda state: (state.term, state.version))
    has_master = bool(candidates)
    return ClusterView(
        reachable=frozenset(states),
        cluster_uuids=uuids,
        cluster_name=best.cluster_name or None,
        master=best.master if has_master else None,
        term=best.term,
        version=best.version,
        members=best.node_names if has_master else frozenset(),
        voters=frozenset(best.committed_voters),
        accepted_voters=frozenset(best.accepted_voters),
        exclusions=frozenset(best.exclusion_names),
        health=health.status if health else None,
        formation_problem=health.formation_problem if health else None,
        voter_ids=frozenset(best.committed_config_ids),
        nonvoting_members=(
            frozenset(node.name for node in best.nodes.values() if not node.master_eligible)
            if has_master
            else frozenset()
        ),
        node_ids=dict(node_ids or {}),
        names_by_id={node_id: node.name for state in states.values() for node_id, node in state.nodes.items()},
    )
