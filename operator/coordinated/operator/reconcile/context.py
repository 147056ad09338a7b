"""What the steps of one pass share: the cluster, the operator's services, what earlier steps found, and the
shape of a step's result."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from coordinated.operator import manifests, metrics
from coordinated.operator.config import OperatorConfig
from coordinated.operator.kube import Kube
from coordinated.operator.observation import Observation, PodObservation, StatefulSetObservation
from coordinated.operator.planner import Action, ActionKind
from coordinated.operator.sidecar_client import SidecarConnections
from coordinated.operator.spec import ClusterSpec
from coordinated.operator.status import Condition, Members
from coordinated.operator.volumes import VolumePlan

Event = tuple[str, str, str]  # (type, reason, message)


@dataclass(frozen=True)
class StepResult:
    """What one step reports: conditions for the status, Events to post (in order), and `requeue`, why the cluster
    is not converged although the planner has nothing more to do (the pass then reports a wait, and is followed
    up soon). `status`: the status subresource to write (merged), once the Events are posted."""

    conditions: tuple[Condition, ...] = ()
    events: tuple[Event, ...] = ()
    requeue: str | None = None
    status: Mapping[str, Any] | None = None


Step = Callable[["Context"], Awaitable[StepResult]]


@dataclass(frozen=True)
class Secured:
    """What the security step learnt or wrote about a cluster's security, for its sidecar calls."""

    tls_source: str | None = None
    token: str | None = None
    ca_pem: bytes | None = None  # the CA the sidecars' certificates are checked against (None: no TLS)
    events: tuple[Event, ...] = ()
    conditions: tuple[Condition, ...] = ()


@dataclass(frozen=True)
class Observed:
    """What the observe step saw of the cluster, as it was when the pass began."""

    statefulset: StatefulSetObservation | None
    nonvoter_set: StatefulSetObservation | None
    obs: Observation
    volume_plans: tuple[VolumePlan, VolumePlan]  # the voters' and the non-voters'
    zones: Mapping[str, str | None]  # Kubernetes node -> zone label
    priority_class: str | None = None  # the class the pods run under (placement.pod_priority_class)
    twin_class: Mapping[str, Any] | None = None  # the non-preempting PriorityClass to create for it
    template_hash: str = ""  # the voters' pod template the spec asks for, hashed (a blocked roll names it)


class Reads:
    """The Kubernetes objects a pass reads, each read once per pass whichever step asks first."""

    def __init__(self, kube: Kube, spec: ClusterSpec) -> None:
        self._kube, self._spec = kube, spec
        self._statefulsets: dict[str, StatefulSetObservation | None] = {}
        self._pods: dict[str, PodObservation] | None = None

    async def statefulset(self, name: str) -> StatefulSetObservation | None:
        if name not in self._statefulsets:
            self._statefulsets[name] = await self._kube.statefulset(name, self._spec.namespace)
        return self._statefulsets[name]

    async def pods(self) -> dict[str, PodObservation]:
        if self._pods is None:
            self._pods = await self._kube.pods(self._spec.namespace, manifests.node_selector_string(self._spec))
        return self._pods


@dataclass
class Context:
    """One pass over one cluster. The steps fill in `secured`, `observed`, `action`, `initial_master_nodes` and
    `members` in this order; the driver gathers the conditions the steps report."""

    spec: ClusterSpec
    body: kopf.Body
    kube: Kube
    http: SidecarConnections
    config: OperatorConfig
    logger: kopf.Logger | logging.Logger
    problems: list[str]  # what is wrong with the spec: nothing is changed but the certificates' renewal
    reads: Reads
    secured: Secured = Secured()
    observed: Observed | None = None
    action: Action | None = None
    initial_master_nodes: tuple[str, ...] = ()
    members: Members | None = None
    conditions: list[Condition] = field(default_factory=list)

    @property
    def previous_status(self) -> Mapping[str, Any]:
        return self.body.get("status") or {}

    @property
    def acting(self) -> bool:
        """Whether this pass may change the cluster: a valid spec, and not paused."""
        return not self.problems and not self.spec.paused

    @property
    def seen(self) -> Observed:
        assert self.observed is not None, "the observe step runs before the steps that use what it saw"
        return self.observed

    @property
    def obs(self) -> Observation:
        return self.seen.obs

    @property
    def decided(self) -> Action:
        assert self.action is not None, "the observe step decides the action before the steps that carry it out"
        return self.action

    def carried_out(self, kinds: frozenset[ActionKind]) -> tuple[Event, ...]:
        """The Event announcing the planner's action, when it is of `kinds` (the kinds the calling step carries
        out) and changed something; counted and logged once."""
        action = self.decided
        if action.kind not in kinds or not action.changes_something:
            return ()
        metrics.ACTIONS.labels(kind=action.kind.value).inc()
        self.logger.info("%s: %s", action.kind.value, action.reason)
        reason = "AdoptingExistingData" if action.adopted_claims else action.kind.value
        return (("Normal", reason, action.reason),)
