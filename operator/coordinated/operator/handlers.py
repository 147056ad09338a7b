"""Kopf handlers: one level-triggered reconcile shared by create, update, resume and a periodic pass.

Each pass observes (StatefulSet, pods, every sidecar), asks the planner for the single next action,
carries it out, re-applies the children and writes the status. Nothing is remembered in memory between
passes except metrics, so a restarted operator picks up exactly where the cluster and annotations are.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import kopf

from coordinated.operator import GROUP, PLURAL, VERSION, manifests, metrics
from coordinated.operator.kube import Kube, load_kube_config
from coordinated.operator.observation import ClusterView, Observation, PodObservation, summarize_states
from coordinated.operator.planner import Action, ActionKind, plan
from coordinated.operator.settings_validation import validate_settings
from coordinated.operator.sidecar_client import (
    ClusterHealth,
    ClusterState,
    SidecarClient,
    SidecarError,
    sidecar_url,
)
from coordinated.operator.spec import (
    CLUSTER_UUID_ANNOTATION,
    INITIAL_MASTER_NODES_ANNOTATION,
    ClusterSpec,
)
from coordinated.operator.status import compute_status, election_event


@dataclass
class OperatorConfig:
    """Set by `coordinated operator` options before Kopf starts."""

    metrics_port: int = 8000
    # {ip}, {pod}, {service}, {namespace} and {port} are filled in; use DNS names when pod IPs are unroutable.
    sidecar_url_template: str = "http://{ip}:{port}"
    sidecar_timeout_seconds: float = 3.0
    stuck_after_seconds: float = 600.0


CONFIG = OperatorConfig()
RECONCILE_INTERVAL_SECONDS = float(os.environ.get("COORDINATED_RECONCILE_INTERVAL", "15"))

_locks: dict[str, asyncio.Lock] = {}
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
    memo.http = aiohttp.ClientSession()
    _progress.stuck_after_seconds = CONFIG.stuck_after_seconds
    metrics.serve(CONFIG.metrics_port)
    memo.periodic = None


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_: Any) -> None:
    periodic = getattr(memo, "periodic", None)
    if periodic is not None:
        periodic.cancel()
    if getattr(memo, "http", None) is not None:
        await memo.http.close()


@kopf.on.probe(id="stuckReconciliations")
def stuck_reconciliations(**_: Any) -> int:
    return _progress.stuck_count()


@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
@kopf.on.resume(GROUP, VERSION, PLURAL)
async def on_change(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    if getattr(memo, "periodic", None) is None:
        # Started from a handler, not from startup, so that the task inherits the context in which Kopf
        # can post Kubernetes Events.
        memo.periodic = asyncio.create_task(reconcile_periodically(memo, logging.getLogger(__name__)))
    await reconcile(body, memo, logger)


# The periodic pass is our own loop over the clusters seen by the watch, not a Kopf timer: Kopf puts a
# finalizer on every object with a timer, which would block deleting a cluster while no operator runs.
_known: dict[str, kopf.Body] = {}


@kopf.on.event(GROUP, VERSION, PLURAL)
def track(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
    key = f"{body['metadata'].get('namespace')}/{body['metadata']['name']}"
    if event.get("type") == "DELETED":
        _known.pop(key, None)
        _progress.forget(key)
    else:
        _known[key] = body


async def reconcile_periodically(memo: kopf.Memo, logger: logging.Logger) -> None:
    while True:
        await asyncio.sleep(RECONCILE_INTERVAL_SECONDS)
        for body in list(_known.values()):
            await reconcile(body, memo, logger)


async def reconcile(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger | logging.Logger) -> None:
    key = f"{body['metadata'].get('namespace')}/{body['metadata']['name']}"
    # Timers and change handlers may overlap for one object; scaling steps must not.
    async with _locks.setdefault(key, asyncio.Lock()):
        started = time.monotonic()
        try:
            # The body Kopf hands over may predate the annotations the previous pass wrote; re-read it.
            fresh = await memo.kube.cluster(body["metadata"].get("namespace"), body["metadata"]["name"])
            if fresh is None:
                return  # deleted meanwhile
            body = kopf.Body(fresh)
            spec = ClusterSpec.from_resource(body)
            converged = await _reconcile_once(spec, body, memo, logger)
            metrics.RECONCILIATIONS.labels(result="success").inc()
            _progress.observe(key, converged)
        except Exception as error:  # the next pass retries; report, do not crash the handler
            metrics.RECONCILIATIONS.labels(result="failure").inc()
            metrics.FAILURES.labels(reason=type(error).__name__).inc()
            _progress.observe(key, converged=False)
            logger.exception("reconciliation of %s failed", key)
            post_event(body, "Warning", "ReconcileFailed", f"{type(error).__name__}: {error}", logger)
            try:
                conditions = _error_conditions(body, f"{type(error).__name__}: {error}")
                namespace, name = key.split("/", 1)
                await memo.kube.patch_status(namespace, name, {"conditions": conditions})
            except Exception:  # the API server may be what failed; the next pass retries
                logger.debug("could not record the failure in the status", exc_info=True)
        finally:
            metrics.DURATION.observe(time.monotonic() - started)


async def _reconcile_once(spec: ClusterSpec, body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger) -> bool:
    kube: Kube = memo.kube
    previous_status: Mapping[str, Any] = body.get("status") or {}
    problems = validate_settings(spec.settings)

    statefulset_replicas = await kube.statefulset_replicas(manifests.statefulset_name(spec), spec.namespace)
    pods = await kube.pods(spec.namespace, manifests.selector_string(spec))
    view = await observe_sidecars(memo.http, spec, pods)
    obs = Observation(
        statefulset_name=manifests.statefulset_name(spec),
        desired_replicas=spec.replicas,
        statefulset_replicas=statefulset_replicas,
        pods=pods,
        cluster=view,
        pinned_initial_master_nodes=spec.pinned_initial_master_nodes,
        recorded_cluster_uuid=spec.recorded_cluster_uuid,
        paused=spec.paused,
    )
    if problems:
        action = Action(ActionKind.REFUSE, "invalid spec: " + "; ".join(problems), statefulset_replicas)
    else:
        action = plan(obs)
        if not spec.paused:
            await _carry_out(action, spec, obs, body, memo, logger)

    if (message := election_event(previous_status, obs)) is not None:
        post_event(body, "Normal", "MasterElected", message, logger)
    last = previous_status.get("lastAction") or {}
    if action.kind is ActionKind.REFUSE and last.get("reason") != action.reason:
        post_event(body, "Warning", "ScalingRefused", action.reason, logger)

    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = compute_status(
        obs,
        action,
        generation=spec.generation,
        selector=manifests.selector_string(spec),
        previous=previous_status,
        now=now,
        problems=problems,
    )
    # Written at once (not deferred) so an overlapping pass reads this status as its previous one.
    await kube.patch_status(spec.namespace, spec.name, status)
    return action.kind is ActionKind.NONE


async def observe_sidecars(
    http: aiohttp.ClientSession, spec: ClusterSpec, pods: Mapping[str, PodObservation]
) -> ClusterView:
    clients = {name: _client(http, spec, pod) for name, pod in pods.items() if pod.ip}

    async def state_of(name: str) -> tuple[str, ClusterState | None]:
        try:
            return name, await clients[name].cluster_state(local=True)
        except SidecarError:
            return name, None

    answers = await asyncio.gather(*(state_of(name) for name in clients))
    states = {name: state for name, state in answers if state is not None}
    health: ClusterHealth | None = None
    view = summarize_states(states)
    asked = view.master if view.master in clients else next(iter(states), None)
    if asked is not None:
        try:
            health = await clients[asked].cluster_health()
        except SidecarError:
            health = None
    return summarize_states(states, health)


def _client(http: aiohttp.ClientSession, spec: ClusterSpec, pod: PodObservation) -> SidecarClient:
    url = sidecar_url(
        CONFIG.sidecar_url_template,
        pod=pod.name,
        ip=pod.ip,
        service=manifests.headless_service_name(spec),
        namespace=spec.namespace,
    )
    return SidecarClient(http, url, timeout_seconds=CONFIG.sidecar_timeout_seconds)


def _coordinator(http: aiohttp.ClientSession, spec: ClusterSpec, obs: Observation) -> SidecarClient:
    """The sidecar to send voting-config changes to: the master, else any that answered."""
    candidates = [obs.cluster.master, *sorted(obs.cluster.reachable)]
    for name in candidates:
        if name and (pod := obs.pods.get(name)) is not None and pod.ip:
            return _client(http, spec, pod)
    raise SidecarError("no sidecar is reachable to change the voting configuration")


async def _carry_out(
    action: Action,
    spec: ClusterSpec,
    obs: Observation,
    body: kopf.Body,
    memo: kopf.Memo,
    logger: kopf.Logger | logging.Logger,
) -> None:
    kube: Kube = memo.kube
    annotations: dict[str, str | None] = {}

    # What the bootstrap ConfigMap must hold after this step.
    if action.kind is ActionKind.PIN_BOOTSTRAP:
        initial_master_nodes = action.nodes
        annotations[INITIAL_MASTER_NODES_ANNOTATION] = ",".join(action.nodes)
    elif action.kind is ActionKind.COMPLETE_BOOTSTRAP or obs.recorded_cluster_uuid:
        initial_master_nodes = ()
    else:
        initial_master_nodes = obs.pinned_initial_master_nodes

    if action.kind is ActionKind.COMPLETE_BOOTSTRAP:
        annotations[CLUSTER_UUID_ANNOTATION] = action.cluster_uuid
        annotations[INITIAL_MASTER_NODES_ANNOTATION] = None  # the list is never used again
    if annotations:
        await kube.patch_annotations(spec.namespace, spec.name, annotations)

    await kube.create_if_absent(manifests.transport_secret(spec, secrets.token_urlsafe(48)))
    children = manifests.desired_children(
        spec,
        replicas=action.statefulset_replicas or 0,
        initial_master_nodes=initial_master_nodes,
        health=obs.cluster.health,
        voters=len(obs.cluster.voters),
    )
    for child in children:
        if child["kind"] == "StatefulSet" and action.statefulset_replicas is None:
            continue  # not before the bootstrap list is pinned
        await kube.apply(child)
    kinds = {child["kind"] for child in children}
    if "PodDisruptionBudget" not in kinds:
        await kube.delete_if_present("policy/v1", "PodDisruptionBudget", spec.name, spec.namespace)
    if "CronJob" not in kinds:
        await kube.delete_if_present("batch/v1", "CronJob", manifests.audit_cronjob_name(spec), spec.namespace)

    if action.kind is ActionKind.EXCLUDE:
        await _coordinator(memo.http, spec, obs).add_voting_config_exclusions(action.nodes)
    elif action.kind is ActionKind.CLEAR_EXCLUSIONS:
        await _coordinator(memo.http, spec, obs).clear_voting_config_exclusions(action.wait_for_removal)

    if action.changes_something:
        metrics.ACTIONS.labels(kind=action.kind.value).inc()
        logger.info("%s: %s", action.kind.value, action.reason)
        post_event(body, "Normal", action.kind.value, action.reason, logger)


def post_event(
    body: kopf.Body, event_type: str, reason: str, message: str, logger: kopf.Logger | logging.Logger
) -> None:
    """A Kubernetes Event through Kopf; a failure to post must never fail a reconciliation."""
    try:
        (kopf.warn if event_type == "Warning" else kopf.info)(body, reason=reason, message=message[:1000])
    except (LookupError, RuntimeError):
        logger.warning("could not post event %s: %s", reason, message)


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
