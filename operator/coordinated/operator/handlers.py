"""The Kopf registration: what the operator reacts to, and nothing else.

Every reaction asks the work queue (work_queue.py) for a pass over one cluster; a pass is the reconcile driver's
(reconcile/driver.py), which runs the ordered steps. The operator's shared objects (its configuration, the
Kubernetes client, the sidecar connections, the queue, the progress tracker and the leader election) live in
Kopf's memo: the startup handler puts them in the operator-wide memo, which every per-object memo copies by
reference.

Only watches are registered (`kopf.on.event`), no change handlers: those write Kopf's own records onto the
resource, and with several replicas a replica that is not the leader would mark a change as handled that the
leader has not seen. A change is what the queue's `essence` says (the spec's generation, the annotations and
labels); any replica follows every cluster, and only the leader's queue runs passes.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from coordinated.operator import GROUP, PLURAL, VERSION, metrics
from coordinated.operator.config import OperatorConfig
from coordinated.operator.kube import Kube, load_kube_config
from coordinated.operator.leadership import LeaderElection, LeaseStore, own_identity
from coordinated.operator.reconcile import driver
from coordinated.operator.sidecar_client import SidecarConnections
from coordinated.operator.work_queue import WorkQueue, cluster_key


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 300
    # Set by `coordinated operator` (cli.py) through the environment, or by an embedding caller in the memo.
    config: OperatorConfig = memo.get("config") or OperatorConfig.from_environment()
    memo.config = config
    load_kube_config()
    memo.kube = Kube()
    memo.http = SidecarConnections(config.sidecar_url_template, config.sidecar_timeout_seconds)
    memo.progress = metrics.ProgressTracker(stuck_after_seconds=config.stuck_after_seconds)
    metrics.serve(config.metrics_port)
    if config.lease_name and config.namespace:

        def stopped_leading() -> None:
            memo.work.step_down()
            metrics.forget_clusters()

        election = LeaderElection(
            LeaseStore(config.namespace, config.lease_name),
            own_identity(),
            on_started=lambda: memo.work.lead(memo),
            on_stopped=stopped_leading,
        )
        memo.election = election
        # Every per-object memo is a shallow copy of this one: they all share this queue, and its one periodic loop.
        memo.work = make_work_queue(config, leading=lambda: election.leading)
        memo.election_task = asyncio.create_task(election.run())
    else:
        metrics.LEADER.set(1)  # the only replica
        memo.work = make_work_queue(config)
        memo.work.start_periodic(memo)


def make_work_queue(config: OperatorConfig, leading: Any = None) -> WorkQueue:
    # Late-bound, so that the pass and the interval can be replaced while the operator runs (tests do).
    return WorkQueue(
        lambda body, memo, logger: driver.reconcile(body, memo, logger),
        lambda: config.reconcile_interval_seconds,
        logging.getLogger(__name__),
        leading=leading or (lambda: True),
    )


# How long the operator, told to stop, lets the passes under way end before it closes their connections.
DRAIN_SECONDS = 10.0


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_: Any) -> None:
    if getattr(memo, "work", None) is not None:
        memo.work.stop()
        await memo.work.drain(DRAIN_SECONDS)  # still the leader meanwhile: the Lease is renewed
    if (election := memo.get("election")) is not None:
        await election.release()  # once the passes ended: another replica takes over at once
    if (task := memo.get("election_task")) is not None:
        task.cancel()
    if getattr(memo, "http", None) is not None:
        await memo.http.aclose()


@kopf.on.probe(id="stuckReconciliations")
def stuck_reconciliations(memo: kopf.Memo, **_: Any) -> int:
    progress: metrics.ProgressTracker | None = memo.get("progress")
    return progress.stuck_count() if progress is not None else 0


# A new cluster (also each one seen when the operator starts), a changed spec or annotation: a pass at once.
# The periodic pass is our own loop over the clusters seen by the watch (the work queue's), not a Kopf timer:
# Kopf puts a finalizer on every object with a timer, which would block deleting a cluster while no operator runs.
@kopf.on.event(GROUP, VERSION, PLURAL)
async def track(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:  # async: see below
    key = cluster_key(body)
    if event.get("type") == "DELETED":
        memo.work.forget(key)
        if (progress := memo.get("progress")) is not None:
            progress.forget(key)
        metrics.forget_cluster(*key.split("/", 1))
    elif memo.work.watch(body):
        memo.work.request_pass(key, memo)


# A change to an owned pod (created, deleted, readiness flipped by the sidecar's /readyz probe) triggers a
# pass for its cluster at once, so the status never lags the pods by a reconcile interval; the queue coalesces
# the requests that come while a pass runs.
@kopf.on.event("", "v1", "pods", labels={"app.kubernetes.io/managed-by": "coordinated-operator"})
async def pod_changed(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:  # async: Kopf runs sync ones in threads
    labels = body["metadata"].get("labels") or {}
    instance = labels.get("app.kubernetes.io/instance")
    if instance and labels.get("app.kubernetes.io/component") == "node":
        memo.work.request_pass(f"{body['metadata'].get('namespace')}/{instance}", memo)
