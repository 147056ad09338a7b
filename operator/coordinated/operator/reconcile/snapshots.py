"""Step: once the cluster has formed, the restore of spec.restoreFrom (once), then snapshots as scheduled or
requested (snapshot_schedule.py decides). It runs after the status is written, and writes its own sections."""

from __future__ import annotations

import datetime

from coordinated.operator import manifests, snapshot_schedule
from coordinated.operator.observation import Observation, StatefulSetObservation
from coordinated.operator.reconcile.context import Context, Event, StepResult
from coordinated.operator.reconcile.sidecars import coordinator
from coordinated.operator.spec import ClusterSpec


async def step(ctx: Context) -> StepResult:
    spec, obs = ctx.spec, ctx.obs
    if not (
        ctx.acting
        and obs.cluster.master is not None
        and spec.recorded_cluster_uuid
        and snapshot_repository_ready(spec, ctx.seen.statefulset, obs)
    ):
        return StepResult()
    previous_status = ctx.previous_status
    now = datetime.datetime.now(datetime.UTC)
    outcomes: list[tuple[str, snapshot_schedule.Outcome]] = []
    previous_restore = previous_status.get("restore") or {}
    if snapshot_schedule.restore_wanted(spec, previous_restore):
        client = coordinator(ctx.http, spec, obs, ctx.secured)
        outcomes.append(("restore", await snapshot_schedule.restore_once(client, spec, previous_restore, now)))
    previous_snapshots = previous_status.get("snapshots") or {}
    restoring = bool(outcomes) and not outcomes[0][1].status.get("completed")
    why = snapshot_schedule.snapshot_wanted(spec, previous_snapshots, now)
    if why is not None and not restoring:  # a snapshot before the restore would hold nothing of use
        client = coordinator(ctx.http, spec, obs, ctx.secured)
        outcomes.append(
            ("snapshots", await snapshot_schedule.take_snapshot(client, spec, previous_snapshots, why, now))
        )
    announced: list[Event] = []
    for section, outcome in outcomes:
        if outcome.annotations:
            await ctx.kube.patch_annotations(spec.namespace, spec.name, outcome.annotations)
        await ctx.kube.patch_status(spec.namespace, spec.name, {section: outcome.status})
        for event_type, reason, message in outcome.events:
            (ctx.logger.warning if event_type == "Warning" else ctx.logger.info)("%s: %s", reason, message)
            announced.append((event_type, reason, message))
    return StepResult(events=tuple(announced))


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
