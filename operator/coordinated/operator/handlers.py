"""Kopf handlers: one level-triggered reconcile shared by create, update, resume and a periodic pass.

Each pass observes (StatefulSet, pods, every sidecar), asks the planner for the single next action,
carries it out, re-applies the children and writes the status. Nothing is remembered in memory between
passes except metrics, so a restarted operator picks up exactly where the cluster and annotations are.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import os
import secrets
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from coordinated.operator import (
    GROUP,
    PLURAL,
    VERSION,
    certificates,
    events,
    manifests,
    membership,
    metrics,
    object_storage,
    placement,
    security,
    snapshot_schedule,
    volumes,
)
from coordinated.operator.kube import Kube, load_kube_config
from coordinated.operator.observation import (
    ClaimObservation,
    ClusterView,
    Observation,
    PodObservation,
    StatefulSetObservation,
    summarize_states,
)
from coordinated.operator.planner import Action, ActionKind, plan
from coordinated.operator.settings_validation import validate_settings
from coordinated.operator.sidecar_client import (
    ClusterHealth,
    ClusterState,
    SidecarAccess,
    SidecarClient,
    SidecarConnections,
    SidecarError,
    ca_ssl_context,
    sidecar_url,
)
from coordinated.operator.spec import (
    ADOPTED_CLAIMS_ANNOTATION,
    CLUSTER_UUID_ANNOTATION,
    HIBERNATED_VOTERS_ANNOTATION,
    HIBERNATION_SNAPSHOT_ANNOTATION,
    INITIAL_MASTER_NODES_ANNOTATION,
    ClusterSpec,
)
from coordinated.operator.status import Condition, Members, compute_status
from coordinated.operator.work_queue import WorkQueue, cluster_key


@dataclass
class OperatorConfig:
    """Set by `coordinated operator` options before Kopf starts."""

    metrics_port: int = 8000
    # {scheme}, {ip}, {pod}, {service}, {namespace} and {port} are filled in; use DNS names when pod IPs are
    # unroutable. {scheme} is https when the cluster has TLS on.
    sidecar_url_template: str = "{scheme}://{ip}:{port}"
    sidecar_timeout_seconds: float = 3.0
    stuck_after_seconds: float = 600.0
    # Where the operator's own pods run, so each cluster's NetworkPolicy admits them to the client port.
    namespace: str | None = None
    pod_labels: Mapping[str, str] = field(default_factory=dict)


CONFIG = OperatorConfig()
RECONCILE_INTERVAL_SECONDS = float(os.environ.get("COORDINATED_RECONCILE_INTERVAL", "15"))

_progress = metrics.ProgressTracker()


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.posting.level = logging.INFO
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kopf.coordinated.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="kopf.coordinated.dev", key="last-handled-configuration"
    )
    settings.watching.server_timeout = 300
    load_kube_config()
    memo.kube = Kube()
    memo.http = SidecarConnections()
    _progress.stuck_after_seconds = CONFIG.stuck_after_seconds
    metrics.serve(CONFIG.metrics_port)
    # Every per-object memo is a shallow copy of this one: they all share this queue, and its one periodic loop.
    memo.work = make_work_queue()
    memo.work.start_periodic(memo)


def make_work_queue() -> WorkQueue:
    # Late-bound, so that the pass and the interval can be replaced while the operator runs (tests do).
    return WorkQueue(
        lambda body, memo, logger: reconcile(body, memo, logger),
        lambda: RECONCILE_INTERVAL_SECONDS,
        logging.getLogger(__name__),
    )


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_: Any) -> None:
    if getattr(memo, "work", None) is not None:
        memo.work.stop()
    if getattr(memo, "http", None) is not None:
        await memo.http.aclose()


@kopf.on.probe(id="stuckReconciliations")
def stuck_reconciliations(**_: Any) -> int:
    return _progress.stuck_count()


@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
@kopf.on.resume(GROUP, VERSION, PLURAL)
async def on_change(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    await memo.work.run(body, memo, logger)


# The periodic pass is our own loop over the clusters seen by the watch (the work queue's), not a Kopf timer:
# Kopf puts a finalizer on every object with a timer, which would block deleting a cluster while no operator runs.
@kopf.on.event(GROUP, VERSION, PLURAL)
def track(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    if event.get("type") == "DELETED":
        memo.work.forget(cluster_key(body))
        _progress.forget(cluster_key(body))
    else:
        memo.work.watch(body)


# A change to an owned pod (created, deleted, readiness flipped by the sidecar's /readyz probe) triggers a
# pass for its cluster at once, so the status never lags the pods by a reconcile interval; the queue coalesces
# the requests that come while a pass runs.
@kopf.on.event("", "v1", "pods", labels={"app.kubernetes.io/managed-by": "coordinated-operator"})
async def pod_changed(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:  # async: Kopf runs sync ones in threads
    labels = body["metadata"].get("labels") or {}
    instance = labels.get("app.kubernetes.io/instance")
    if instance and labels.get("app.kubernetes.io/component") == "node":
        memo.work.request_pass(f"{body['metadata'].get('namespace')}/{instance}", memo)


async def reconcile(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger | logging.Logger) -> Action | None:
    """One pass (the work queue runs one at a time per cluster); what it decided, None when it failed or found
    the cluster gone."""
    key = cluster_key(body)
    started = time.monotonic()
    try:
        # The body Kopf hands over may predate the annotations the previous pass wrote; re-read it.
        fresh = await memo.kube.cluster(body["metadata"].get("namespace"), body["metadata"]["name"])
        if fresh is None:
            return None  # deleted meanwhile
        body = kopf.Body(fresh)
        spec = ClusterSpec.from_resource(body)
        action = await _reconcile_once(spec, body, memo, logger)
        metrics.RECONCILIATIONS.labels(result="success").inc()
        _progress.observe(key, action.kind is ActionKind.NONE)
        return action
    except Exception as error:  # the next pass retries; report, do not crash the handler
        metrics.RECONCILIATIONS.labels(result="failure").inc()
        metrics.FAILURES.labels(reason=type(error).__name__).inc()
        _progress.observe(key, converged=False)
        message = describe_error(error)
        # One log line, one Event and one condition per distinct failure, not one per pass.
        if message == _current_error(body):
            logger.debug("reconciliation of %s still fails: %s", key, message, exc_info=True)
            return None
        logger.warning("reconciliation of %s failed: %s", key, message)
        logger.debug("reconciliation of %s failed", key, exc_info=True)
        await post_event(memo, body, "Warning", "ReconcileFailed", message, logger)
        try:
            conditions = _error_conditions(body, message)
            namespace, name = key.split("/", 1)
            await memo.kube.patch_status(namespace, name, {"conditions": conditions})
        except Exception:  # the API server may be what failed; the next pass retries
            logger.debug("could not record the failure in the status", exc_info=True)
        return None
    finally:
        metrics.DURATION.observe(time.monotonic() - started)


async def _reconcile_once(spec: ClusterSpec, body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger) -> Action:
    kube: Kube = memo.kube
    previous_status: Mapping[str, Any] = body.get("status") or {}
    problems = validate_settings(spec.settings) + security.validate_security(spec) + object_storage.validate(spec)
    if spec.snapshots is not None and (schedule := snapshot_schedule.schedule_problem(spec.snapshots.schedule)):
        problems.append(schedule)

    statefulset = await kube.statefulset(manifests.statefulset_name(spec), spec.namespace)
    nonvoter_set = await kube.statefulset(manifests.nonvoter_statefulset_name(spec), spec.namespace)
    statefulset_replicas = statefulset.replicas if statefulset is not None else None
    pods = await kube.pods(spec.namespace, manifests.node_selector_string(spec))
    # Certificates are renewed even while paused: letting them expire would be worse than any change.
    secured = await ensure_security(
        kube,
        spec,
        certificate_pods(spec, statefulset, nonvoter_set, pods),
        write=not problems,
        logger=logger,
        previous_status=previous_status,
    )
    for event_type, reason, text in secured.events:
        await post_event(memo, body, event_type, reason, text, logger)
    view = await observe_sidecars(memo.http, spec, pods, secured)
    voter_claims, nonvoter_claims = await data_claims(kube, spec)
    existing_claims: tuple[str, ...] = ()
    if spec.recorded_cluster_uuid is None and not spec.pinned_initial_master_nodes and statefulset_replicas is None:
        existing_claims = tuple(claim.name for claim in voter_claims)
    volume_plans = (
        await _plan_volumes(kube, spec, statefulset, voter_claims),
        await _plan_volumes(kube, spec, nonvoter_set, nonvoter_claims),
    )
    zones = await kube.zones(frozenset(pod.node_name for pod in pods.values() if pod.node_name))
    obs = Observation(
        statefulset_name=manifests.statefulset_name(spec),
        desired_replicas=spec.voters,
        statefulset_replicas=statefulset_replicas,
        pods=pods,
        cluster=view,
        pinned_initial_master_nodes=spec.pinned_initial_master_nodes,
        recorded_cluster_uuid=spec.recorded_cluster_uuid,
        paused=spec.paused,
        existing_claims=existing_claims,
        adopted_claims=spec.adopted_claims,
        update_revision=statefulset.update_revision if statefulset is not None else None,
        statefulset_deleting=statefulset is not None and statefulset.deleting,
        desired_nonvoters=spec.non_voters,
        nonvoter_statefulset_replicas=nonvoter_set.replicas if nonvoter_set is not None else None,
        hibernated_voters=spec.hibernated_voters,
        snapshot_before_hibernation=(
            spec.hibernating and spec.snapshots is not None and HIBERNATION_SNAPSHOT_ANNOTATION not in spec.annotations
        ),
    )
    if problems:
        action = Action(ActionKind.REFUSE, "invalid spec: " + "; ".join(problems), statefulset_replicas)
    else:
        action = plan(obs)
        if not spec.paused:
            layout = membership.Layout(
                volume_plans[0].template_size,
                membership.nonvoter_layout(obs, nonvoter_set, volume_plans[1].template_size),
            )
            await _carry_out(action, spec, obs, body, memo, logger, secured, layout)
            may_recreate = action.kind is ActionKind.NONE
            await _grow_volumes(kube, spec, volume_plans[0], manifests.statefulset_name(spec), may_recreate)
            await _grow_volumes(kube, spec, volume_plans[1], manifests.nonvoter_statefulset_name(spec), may_recreate)
            growing = [p.condition for p in volume_plans if p.condition and p.condition.reason == "Expanding"]
            if growing and action.kind is ActionKind.NONE:
                # Not converged until the volumes have grown, and followed up like any wait (no pod event comes).
                action = Action(ActionKind.WAIT, growing[0].message, action.statefulset_replicas)

    previous_nodes = previous_status.get("nodes") or ()
    replaced = membership.replacements(obs, previous_nodes)
    finished = membership.replaced_between_passes(obs, replaced, previous_nodes)
    members = Members(
        voting_config=tuple(membership.voting_config_names(obs, replaced, previous_nodes)),
        nodes=tuple(membership.node_entries(obs, replaced, zones, previous_nodes)),
        quorum_lost=membership.quorum_lost(obs, replaced),
    )
    voter_nodes = {name: pod.node_name for name, pod in obs.voter_pods.items() if pod.node_name}
    unschedulable = {name: pod.unschedulable for name, pod in pods.items() if pod.unschedulable}
    conditions = [
        *secured.conditions,
        *([storage] if (storage := volumes.storage_condition(*volume_plans)) else []),
        *([spread] if (spread := placement.voters_spread(voter_nodes, zones)) else []),
        placement.pods_scheduled(unschedulable),
        membership.replacement_condition(
            replaced, events.condition_of(previous_status, membership.REPLACEMENT_CONDITION), finished
        ),
    ]
    announced = [
        *membership.replacement_events(replaced, previous_nodes, obs, finished),
        *events.condition_events(previous_status, conditions, quorum_lost=members.quorum_lost),
        *events.spec_events(spec, obs, action, previous_status),
    ]
    for event in announced:
        await post_event(memo, body, *event, logger)

    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = compute_status(
        obs,
        action,
        generation=spec.generation,
        selector=manifests.node_selector_string(spec),
        previous=previous_status,
        now=now,
        problems=problems,
        extra_conditions=conditions,
        members=members,
    )
    # Written at once (not deferred) so an overlapping pass reads this status as its previous one.
    await kube.patch_status(spec.namespace, spec.name, status)
    if (
        not problems
        and not spec.paused
        and obs.cluster.master is not None
        and spec.recorded_cluster_uuid
        and snapshot_repository_ready(spec, statefulset, obs)
    ):
        await _snapshots_and_restore(spec, obs, body, memo, logger, secured, previous_status)
    return action


async def _plan_volumes(
    kube: Kube, spec: ClusterSpec, statefulset: StatefulSetObservation | None, claims: list[ClaimObservation]
) -> volumes.VolumePlan:
    storage_class = volumes.class_to_check(spec.storage.size, statefulset, claims)
    expandable = await kube.storage_class_expandable(storage_class) if storage_class else None
    return volumes.plan_volumes(spec.storage.size, statefulset, claims, expandable, storage_class)


def snapshot_repository_ready(spec: ClusterSpec, statefulset: StatefulSetObservation | None, obs: Observation) -> bool:
    """Whether every pod runs with the snapshot repository: the snapshot volume at path.repo, or (snapshots in a
    bucket, no volume) the S3 client settings. Right after spec.snapshots is added the pods still run the previous
    template, and a snapshot or restore asked of them fails (400: no path.repo, or no S3 client); a request waits
    for the rolling restart instead."""
    return (
        statefulset is not None
        and (manifests.SNAPSHOT_VOLUME in statefulset.volumes or not spec.snapshot_volume)
        and not obs.outdated_pods
        and not statefulset.deleting
    )


async def _snapshots_and_restore(
    spec: ClusterSpec,
    obs: Observation,
    body: kopf.Body,
    memo: kopf.Memo,
    logger: kopf.Logger | logging.Logger,
    secured: Secured,
    previous_status: Mapping[str, Any],
) -> None:
    """Once the cluster has formed: restore spec.restoreFrom once, then snapshots as scheduled or requested."""
    kube: Kube = memo.kube
    now = datetime.datetime.now(datetime.UTC)
    outcomes: list[tuple[str, snapshot_schedule.Outcome]] = []
    previous_restore = previous_status.get("restore") or {}
    if snapshot_schedule.restore_wanted(spec, previous_restore):
        client = _coordinator(memo.http, spec, obs, secured)
        outcomes.append(("restore", await snapshot_schedule.restore_once(client, spec, previous_restore, now)))
    previous_snapshots = previous_status.get("snapshots") or {}
    restoring = bool(outcomes) and not outcomes[0][1].status.get("completed")
    why = snapshot_schedule.snapshot_wanted(spec, previous_snapshots, now)
    if why is not None and not restoring:  # a snapshot before the restore would hold nothing of use
        client = _coordinator(memo.http, spec, obs, secured)
        outcomes.append(
            ("snapshots", await snapshot_schedule.take_snapshot(client, spec, previous_snapshots, why, now))
        )
    for section, outcome in outcomes:
        if outcome.annotations:
            await kube.patch_annotations(spec.namespace, spec.name, outcome.annotations)
        await kube.patch_status(spec.namespace, spec.name, {section: outcome.status})
        for event_type, reason, message in outcome.events:
            (logger.warning if event_type == "Warning" else logger.info)("%s: %s", reason, message)
            await post_event(memo, body, event_type, reason, message, logger)


async def data_claims(kube: Kube, spec: ClusterSpec) -> tuple[list[ClaimObservation], list[ClaimObservation]]:
    """The data claims that exist, of the voters' pods (data-NAME-N) and of the non-voters' (data-NAME-nonvoter-N)."""
    claims = await kube.claims(spec.namespace, manifests.selector_string(spec))

    def of(statefulset: str) -> list[ClaimObservation]:
        prefix = f"{manifests.DATA_VOLUME}-{statefulset}-"
        return [claim for claim in claims if claim.name.startswith(prefix) and claim.name[len(prefix) :].isdigit()]

    return of(manifests.statefulset_name(spec)), of(manifests.nonvoter_statefulset_name(spec))


async def _grow_volumes(
    kube: Kube, spec: ClusterSpec, volume_plan: volumes.VolumePlan, statefulset: str, may_recreate: bool
) -> None:
    """Raises the claims the plan names, then (once nothing else is under way) deletes the StatefulSet, orphaning
    its pods and claims, so that the next pass creates it with the larger claim template."""
    for claim in volume_plan.expand:
        await kube.resize_claim(claim, spec.namespace, spec.storage.size)
    if volume_plan.recreate_statefulset and may_recreate:
        await kube.orphan_statefulset(statefulset, spec.namespace)


def event_reason(action: Action) -> str:
    return "AdoptingExistingData" if action.adopted_claims else action.kind.value


async def observe_sidecars(
    http: SidecarConnections,
    spec: ClusterSpec,
    pods: Mapping[str, PodObservation],
    secured: Secured | None = None,
) -> ClusterView:
    clients = {name: _client(http, spec, pod, secured) for name, pod in pods.items() if pod.ip}

    async def state_of(name: str) -> tuple[str, ClusterState | None, str | None]:
        try:
            state, node_id = await asyncio.gather(clients[name].cluster_state(local=True), clients[name].node_id())
            return name, state, node_id
        except SidecarError:
            return name, None, None

    answers = await asyncio.gather(*(state_of(name) for name in clients))
    states = {name: state for name, state, _ in answers if state is not None}
    node_ids = {name: node_id for name, _, node_id in answers if node_id is not None}
    health: ClusterHealth | None = None
    view = summarize_states(states)
    asked = view.master if view.master in clients else next(iter(states), None)
    if asked is not None:
        try:
            health = await clients[asked].cluster_health()
        except SidecarError:
            health = None
    return summarize_states(states, health, node_ids)


def _client(
    http: SidecarConnections, spec: ClusterSpec, pod: PodObservation, secured: Secured | None = None
) -> SidecarClient:
    access = SidecarAccess()
    if secured is not None:
        hostname = manifests.pod_dns_name(spec, pod.name) if secured.ssl_context is not None else None
        access = SidecarAccess(token=secured.token, ssl_context=secured.ssl_context, server_hostname=hostname)
    url = sidecar_url(
        CONFIG.sidecar_url_template,
        pod=pod.name,
        ip=pod.ip,
        service=manifests.headless_service_name(spec),
        namespace=spec.namespace,
        scheme=access.scheme,
    )
    return SidecarClient(http, url, timeout_seconds=CONFIG.sidecar_timeout_seconds, access=access)


def _coordinator(
    http: SidecarConnections, spec: ClusterSpec, obs: Observation, secured: Secured | None = None
) -> SidecarClient:
    """The sidecar to send voting-config changes to: the master, else any that answered."""
    candidates = [obs.cluster.master, *sorted(obs.cluster.reachable)]
    for name in candidates:
        if name and (pod := obs.pods.get(name)) is not None and pod.ip:
            return _client(http, spec, pod, secured)
    raise SidecarError("no sidecar is reachable to change the voting configuration")


async def _carry_out(
    action: Action,
    spec: ClusterSpec,
    obs: Observation,
    body: kopf.Body,
    memo: kopf.Memo,
    logger: kopf.Logger | logging.Logger,
    secured: Secured | None = None,
    layout: membership.Layout | None = None,
) -> None:
    kube: Kube = memo.kube
    annotations: dict[str, str | None] = {}
    tls_source = secured.tls_source if secured is not None else None
    nonvoters = layout.nonvoters if layout is not None else None

    # What the bootstrap ConfigMap must hold after this step.
    if action.kind is ActionKind.PIN_BOOTSTRAP:
        initial_master_nodes = action.nodes
        annotations[INITIAL_MASTER_NODES_ANNOTATION] = ",".join(action.nodes)
        if action.adopted_claims:
            annotations[ADOPTED_CLAIMS_ANNOTATION] = ",".join(action.adopted_claims)
    elif action.kind is ActionKind.COMPLETE_BOOTSTRAP or obs.recorded_cluster_uuid:
        initial_master_nodes = ()
    else:
        initial_master_nodes = obs.pinned_initial_master_nodes

    if action.kind is ActionKind.COMPLETE_BOOTSTRAP:
        annotations[CLUSTER_UUID_ANNOTATION] = action.cluster_uuid
        annotations[INITIAL_MASTER_NODES_ANNOTATION] = None  # the list is never used again
    if action.kind is ActionKind.HIBERNATE:
        annotations[HIBERNATED_VOTERS_ANNOTATION] = str(action.hibernated_voters)
    if action.kind is ActionKind.WAKE:
        annotations[HIBERNATED_VOTERS_ANNOTATION] = None
        annotations[HIBERNATION_SNAPSHOT_ANNOTATION] = None
    if annotations:
        await kube.patch_annotations(spec.namespace, spec.name, annotations)

    await kube.create_if_absent(manifests.transport_secret(spec, secrets.token_urlsafe(48)))
    if (snapshot_claim := manifests.snapshot_claim(spec)) is not None:
        await kube.create_if_absent(snapshot_claim)  # before the pods that mount it
    children = manifests.desired_children(
        spec,
        replicas=action.statefulset_replicas or 0,
        initial_master_nodes=initial_master_nodes,
        health=obs.cluster.health,
        voters=len(obs.cluster.voters),
        tls_source=tls_source,
        claim_size=layout.claim_size if layout is not None else None,
        nonvoters=nonvoters.replicas if nonvoters is not None else None,
        nonvoter_claim_size=nonvoters.claim_size if nonvoters is not None else None,
        # Hibernating or waking: a StatefulSet scaled to 0 keeps its claims, whatever whenScaled says.
        keep_claims=spec.hibernating or obs.hibernated_voters is not None,
    )
    for child in children:
        if child["kind"] == "StatefulSet":
            voting = child["metadata"]["name"] == manifests.statefulset_name(spec)
            if voting and (action.statefulset_replicas is None or obs.statefulset_deleting):
                continue  # not before the bootstrap list is pinned, nor while it is deleted to be created again
            if not voting and (nonvoters is None or nonvoters.deleting):
                continue
        await kube.apply(child)
    kinds = {child["kind"] for child in children}
    if "PodDisruptionBudget" not in kinds:
        await kube.delete_if_present("policy/v1", "PodDisruptionBudget", spec.name, spec.namespace)
    if "CronJob" not in kinds:
        await kube.delete_if_present("batch/v1", "CronJob", manifests.audit_cronjob_name(spec), spec.namespace)
    policy = security.network_policy(spec, security.operator_peer(CONFIG.namespace, CONFIG.pod_labels))
    if policy is not None:
        await kube.apply(policy)
    else:
        name = manifests.network_policy_name(spec)
        await kube.delete_if_present("networking.k8s.io/v1", "NetworkPolicy", name, spec.namespace)

    if action.kind is ActionKind.EXCLUDE:
        await _coordinator(memo.http, spec, obs, secured).add_voting_config_exclusions(action.nodes)
    elif action.kind is ActionKind.CLEAR_EXCLUSIONS:
        await _coordinator(memo.http, spec, obs, secured).clear_voting_config_exclusions(action.wait_for_removal)
    elif action.kind is ActionKind.RESTART:
        for pod in action.nodes:
            await kube.delete_pod(pod, spec.namespace)

    if action.changes_something:
        metrics.ACTIONS.labels(kind=action.kind.value).inc()
        logger.info("%s: %s", action.kind.value, action.reason)
        await post_event(memo, body, "Normal", event_reason(action), action.reason, logger)


# ---- security: CA, certificates and tokens --------------------------------------------------------------
@dataclass(frozen=True)
class Secured:
    """What one pass learnt or wrote about a cluster's security, for its sidecar calls and its status."""

    tls_source: str | None = None
    token: str | None = None
    ssl_context: ssl.SSLContext | None = None
    events: tuple[tuple[str, str, str], ...] = ()  # (type, reason, message)
    conditions: tuple[Condition, ...] = ()


_ssl_contexts: dict[bytes, ssl.SSLContext] = {}  # by CA certificate: one context per CA, not per pass


def _context_for(ca_pem: bytes | None) -> ssl.SSLContext | None:
    if not ca_pem:
        return None
    if ca_pem not in _ssl_contexts:
        _ssl_contexts[ca_pem] = ca_ssl_context(ca_pem)
    return _ssl_contexts[ca_pem]


def certificate_pods(
    spec: ClusterSpec,
    statefulset: StatefulSetObservation | None,
    nonvoter_set: StatefulSetObservation | None,
    pods: Mapping[str, PodObservation],
) -> tuple[str, ...]:
    """Every pod that may run before the next pass, in both pools: the spec's, the StatefulSets', the hibernated
    voters', and any still present."""

    def count(name: str, wanted: int, current: StatefulSetObservation | None) -> int:
        prefix = f"{name}-"
        ordinals = [int(pod[len(prefix) :]) for pod in pods if pod.startswith(prefix) and pod[len(prefix) :].isdigit()]
        return max(wanted, current.replicas if current else 0, *(ordinal + 1 for ordinal in ordinals))

    voters = count(manifests.statefulset_name(spec), max(spec.voters, spec.hibernated_voters or 0), statefulset)
    nonvoters = count(manifests.nonvoter_statefulset_name(spec), spec.non_voters, nonvoter_set)
    return (*manifests.pod_names(spec, voters), *manifests.nonvoter_pod_names(spec, nonvoters))


async def _read_secret(kube: Kube, name: str, namespace: str) -> dict[str, bytes]:
    return security.decode_secret_data(await kube.secret_data(name, namespace))


async def ensure_tokens(kube: Kube, spec: ClusterSpec, write: bool) -> dict[str, str]:
    """The role tokens (suffix -> token), each created once in its own Secret; the tokens file follows them.

    Deleting a token Secret rotates that token: a new one is generated here and the sidecars re-read the
    tokens file when the kubelet projects it.
    """
    tokens: dict[str, str] = {}
    for suffix in manifests.TOKEN_ROLES:
        name = manifests.token_secret_name(spec, suffix)
        token = (await _read_secret(kube, name, spec.namespace)).get(manifests.TOKEN_KEY, b"").decode()
        if not token and write:
            token = secrets.token_urlsafe(32)
            if not await kube.create_if_absent(security.token_secret(spec, suffix, token)):
                token = (await _read_secret(kube, name, spec.namespace)).get(manifests.TOKEN_KEY, b"").decode()
        if token:
            tokens[suffix] = token
    if write and len(tokens) == len(manifests.TOKEN_ROLES):
        await kube.apply(security.tokens_file_secret(spec, tokens))
    return tokens


async def ensure_builtin_certificates(
    kube: Kube, spec: ClusterSpec, pods: tuple[str, ...], write: bool, now: datetime.datetime
) -> tuple[bytes | None, list[tuple[str, str, str]]]:
    """The cluster's CA (created once, never replaced) and every pod's certificate, renewed when due."""
    events: list[tuple[str, str, str]] = []
    ca_name = manifests.ca_secret_name(spec)
    ca = security.ca_from_secret(await _read_secret(kube, ca_name, spec.namespace))
    if ca is None and write:
        lifetime = certificates.parse_duration(spec.tls.ca_lifetime)
        ca = certificates.generate_ca(f"{spec.name}.{spec.namespace} coordinated CA", now, lifetime)
        if not await kube.create_if_absent(security.ca_secret(spec, ca)):
            ca = security.ca_from_secret(await _read_secret(kube, ca_name, spec.namespace))
        else:
            events.append(("Normal", "CertificateAuthorityCreated", f"created the cluster's CA in Secret {ca_name}"))
    if ca is None:
        return None, events
    if write:
        existing = await _read_secret(kube, manifests.certificates_secret_name(spec), spec.namespace)
        planned = security.plan_certificates(spec, ca, existing, pods, now)
        metrics.record_certificate_expiry(spec.namespace, spec.name, planned.data)
        if planned.changed:
            await kube.apply(security.certificates_secret(spec, planned.data))
            if planned.issued:
                issued = ", ".join(f"{pod} ({why})" for pod, why in planned.issued)
                events.append(("Normal", "CertificatesIssued", f"issued certificates for {issued}"))
    return ca.certificate, events


async def ensure_security(
    kube: Kube,
    spec: ClusterSpec,
    pods: tuple[str, ...],
    *,
    write: bool,
    logger: kopf.Logger | logging.Logger,
    previous_status: Mapping[str, Any] | None = None,
    now: datetime.datetime | None = None,
) -> Secured:
    """Creates or renews what the spec asks for (when `write`), and returns what the sidecar calls need."""
    now = now or datetime.datetime.now(datetime.UTC)
    events: list[tuple[str, str, str]] = []
    conditions: list[Condition] = []
    token: str | None = None
    if spec.auth_enabled:
        token = (await ensure_tokens(kube, spec, write)).get("admin")
    if not spec.tls.enabled:
        return Secured(token=token)

    cert_manager = False
    if spec.tls.issuer_ref is not None:
        cert_manager = await kube.serves("cert-manager.io/v1", "Certificate")
        if not cert_manager:
            message = "tls.issuerRef is set but cert-manager is not installed: the operator's own CA signs instead"
            conditions.append(Condition("CertManagerIssuer", False, "CertManagerNotInstalled", message))
            before = [
                c for c in (previous_status or {}).get("conditions") or () if c.get("type") == "CertManagerIssuer"
            ]
            if not before or before[0].get("status") != "False":  # one event per fallback, not one per pass
                events.append(("Warning", "CertManagerNotInstalled", message))
        else:
            message = f"{spec.tls.issuer_ref.kind} {spec.tls.issuer_ref.name} signs the pods' certificate"
            conditions.append(Condition("CertManagerIssuer", True, "CertManagerInstalled", message))
    source = manifests.tls_source_of(spec, cert_manager)
    if source == manifests.CERT_MANAGER_TLS:
        if write:
            await kube.apply(security.cert_manager_certificate(spec))
        issued = await _read_secret(kube, manifests.cert_manager_secret_name(spec), spec.namespace)
        ca_pem = issued.get(manifests.CA_CERT_KEY)
        if not ca_pem and issued:
            logger.warning("%s has no ca.crt: the issuer must be a CA issuer", manifests.cert_manager_secret_name(spec))
    else:
        ca_pem, issued_events = await ensure_builtin_certificates(kube, spec, pods, write, now)
        events += issued_events
    return Secured(source, token, _context_for(ca_pem), tuple(events), tuple(conditions))


async def post_event(
    memo: kopf.Memo,
    body: kopf.Body,
    event_type: str,
    reason: str,
    message: str,
    logger: kopf.Logger | logging.Logger,
) -> None:
    """A Kubernetes Event on the cluster; a failure to post must never fail a reconciliation.

    Posted through our own API client rather than Kopf's, so the periodic loop and the pod watch (which run
    outside any Kopf handler's context) can post too.
    """
    try:
        await memo.kube.post_event(body, event_type, reason, message[:1000])
    except Exception:
        logger.warning("could not post event %s: %s", reason, message, exc_info=True)


def describe_error(error: BaseException) -> str:
    """One short line for a condition and an Event: the API server's own message, never headers or a trace."""
    status, body = getattr(error, "status", None), getattr(error, "body", None)
    if isinstance(status, int) and body is not None:  # kubernetes ApiException or the dynamic client's errors
        text = body.decode(errors="replace") if isinstance(body, bytes) else str(body)
        with contextlib.suppress(ValueError, AttributeError):  # not JSON: keep the text as it is
            text = str(json.loads(text).get("message") or text)
        reason = getattr(error, "reason", "") or ""
        message = f"Kubernetes API error {status} {reason}: {text}"
    else:
        message = f"{type(error).__name__}: {error}"
    first_line = " ".join(message.split())
    return first_line if len(first_line) <= 400 else first_line[:399] + "…"


def _current_error(body: Mapping[str, Any]) -> str | None:
    for condition in (body.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "ReconciliationComplete" and condition.get("reason") == "Error":
            return str(condition.get("message"))
    return None


def _error_conditions(body: kopf.Body, message: str) -> list[dict[str, Any]]:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = [dict(entry) for entry in (body.get("status") or {}).get("conditions") or () if entry.get("type")]
    others = [entry for entry in conditions if entry["type"] != "ReconciliationComplete"]
    others.append(
        {
            "type": "ReconciliationComplete",
            "status": "False",
            "reason": "Error",
            "message": message[:1024],
            "lastTransitionTime": now,
        }
    )
    return others
