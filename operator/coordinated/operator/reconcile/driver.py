"""The pass: re-read the cluster, run the steps in order, and turn a failure into one condition and one Event.

After each step the driver posts the step's Events and writes the status it hands over; its conditions go to
the status step, and its requeue turns a converged decision into a wait (so the work queue follows it up).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

import kopf

from coordinated.operator import metrics, object_storage, security, snapshot_schedule
from coordinated.operator.config import OperatorConfig
from coordinated.operator.planner import Action, ActionKind
from coordinated.operator.reconcile import (
    access,
    bootstrap,
    children,
    membership,
    observe,
    service_account_keys,
    snapshots,
    status,
)
from coordinated.operator.reconcile import security as security_step
from coordinated.operator.reconcile import volumes as volumes_step
from coordinated.operator.reconcile.context import Context, Reads, Step
from coordinated.operator.settings_validation import validate_settings
from coordinated.operator.spec import ClusterSpec
from coordinated.operator.work_queue import cluster_key

STEPS: tuple[Step, ...] = (
    security_step.step,
    service_account_keys.step,
    observe.step,
    bootstrap.step,
    children.step,
    membership.step,
    volumes_step.step,
    access.step,
    status.step,
    snapshots.step,
)


def spec_problems(spec: ClusterSpec) -> list[str]:
    """What is wrong with the spec that the CRD's schema could not say; each a sentence for the status."""
    problems = validate_settings(spec.settings) + security.validate_security(spec) + object_storage.validate(spec)
    if spec.snapshots is not None and (schedule := snapshot_schedule.schedule_problem(spec.snapshots.schedule)):
        problems.append(schedule)
    return problems


async def reconcile(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger | logging.Logger) -> Action | None:
    """One pass (the work queue runs one at a time per cluster); what it decided, None when it failed or found
    the cluster gone."""
    key = cluster_key(body)
    progress: metrics.ProgressTracker | None = memo.get("progress")
    started = time.monotonic()
    try:
        # The body Kopf hands over may predate the annotations the previous pass wrote; re-read it.
        fresh = await memo.kube.cluster(body["metadata"].get("namespace"), body["metadata"]["name"])
        if fresh is None:
            return None  # deleted meanwhile
        body = kopf.Body(fresh)
        spec = ClusterSpec.from_resource(body)
        ctx = Context(
            spec=spec,
            body=body,
            kube=memo.kube,
            http=memo.http,
            config=memo.get("config") or OperatorConfig(),
            logger=logger,
            problems=spec_problems(spec),
            reads=Reads(memo.kube, spec),
        )
        action = await run_steps(ctx)
        metrics.RECONCILIATIONS.labels(result="success").inc()
        if progress is not None:
            progress.observe(key, action.kind is ActionKind.NONE)
        return action
    except Exception as error:  # the next pass retries; report, do not crash the handler
        metrics.RECONCILIATIONS.labels(result="failure").inc()
        metrics.FAILURES.labels(reason=type(error).__name__).inc()
        if progress is not None:
            progress.observe(key, converged=False)
        message = describe_error(error)
        # One log line, one Event and one condition per distinct failure, not one per pass.
        if message == _current_error(body):
            logger.debug("reconciliation of %s still fails: %s", key, message, exc_info=True)
            return None
        logger.warning("reconciliation of %s failed: %s", key, message)
        logger.debug("reconciliation of %s failed", key, exc_info=True)
        await post_event(memo.kube, body, "Warning", "ReconcileFailed", message, logger)
        try:
            conditions = _error_conditions(body, message)
            namespace, name = key.split("/", 1)
            await memo.kube.patch_status(namespace, name, {"conditions": conditions})
        except Exception:  # the API server may be what failed; the next pass retries
            logger.debug("could not record the failure in the status", exc_info=True)
        return None
    finally:
        metrics.DURATION.observe(time.monotonic() - started)


async def run_steps(ctx: Context, steps: tuple[Step, ...] = STEPS) -> Action:
    for step in steps:
        result = await step(ctx)
        ctx.conditions.extend(result.conditions)
        if result.requeue and ctx.action is not None and ctx.action.kind is ActionKind.NONE:
            ctx.action = Action(ActionKind.WAIT, result.requeue, ctx.action.statefulset_replicas)
        for event in result.events:
            await post_event(ctx.kube, ctx.body, *event, ctx.logger)
        if result.status is not None:
            # Written at once (not deferred) so an overlapping pass reads this status as its previous one.
            await ctx.kube.patch_status(ctx.spec.namespace, ctx.spec.name, result.status)
    return ctx.decided


async def post_event(
    kube: Any,
    body: Mapping[str, Any],
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
        await kube.post_event(body, event_type, reason, message[:1000])
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


def _error_conditions(body: Mapping[str, Any], message: str) -> list[dict[str, Any]]:
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
