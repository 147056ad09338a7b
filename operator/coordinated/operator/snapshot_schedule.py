"""spec.snapshots and spec.restoreFrom: when a snapshot is due, what to prune, and one pass of each.

The decisions are pure functions of the spec, the previous status and the time (unit-tested); `take_snapshots`
and `restore_once` carry them out through a sidecar's admin API and return the status to write and the
Events to post. Snapshots are named `<cluster>-<yyyymmdd-hhmmss>` (UTC), so a cluster prunes only its own
in a volume that several clusters share, and the names sort by time.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from croniter import croniter

from coordinated.operator import object_storage
from coordinated.operator.manifests import SNAPSHOT_DIR
from coordinated.operator.sidecar_client import SidecarClient, SnapshotInfo
from coordinated.operator.spec import (
    HIBERNATION_SNAPSHOT_ANNOTATION,
    RESTORED_FROM_ANNOTATION,
    SNAPSHOT_REQUEST_ANNOTATION,
    ClusterSpec,
)

REPOSITORY = "snapshots"  # the repository every cluster registers: its snapshot volume, or spec.snapshots.s3
_TIME_FORMAT = "%Y%m%d-%H%M%S"


def schedule_problem(schedule: str | None) -> str | None:
    if schedule is None:
        return None
    if not croniter.is_valid(schedule):
        return (
            f"snapshots.schedule [{schedule}] is not a cron expression: give 5 fields "
            "(minute hour day-of-month month day-of-week, in UTC) or @hourly, @daily, @weekly, @monthly"
        )
    return None


def parse_time(value: str | None) -> datetime.datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


def format_time(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def snapshot_name(cluster: str, now: datetime.datetime) -> str:
    return f"{cluster}-{now.astimezone(datetime.UTC).strftime(_TIME_FORMAT)}"


def own_snapshots(cluster: str, snapshots: Sequence[SnapshotInfo]) -> list[SnapshotInfo]:
    """This cluster's scheduled snapshots (not another cluster's whose name merely starts the same), oldest
    first."""
    pattern = re.compile(re.escape(cluster) + r"-\d{8}-\d{6}")
    return sorted((s for s in snapshots if pattern.fullmatch(s.name)), key=lambda s: s.name)


def to_prune(cluster: str, snapshots: Sequence[SnapshotInfo], retention: int) -> list[str]:
    """The oldest of this cluster's snapshots beyond the newest `retention`."""
    own = own_snapshots(cluster, snapshots)
    return [s.name for s in own[: max(0, len(own) - retention)]]


def due(
    schedule: str | None, last_attempt: datetime.datetime | None, since: datetime.datetime, now: datetime.datetime
) -> bool:
    """A scheduled time has passed since the last attempt (or since `since`, the cluster's creation). A failed
    attempt counts: the next try is at the next scheduled time, not on every pass."""
    if schedule is None:
        return False
    start = last_attempt or since
    following: datetime.datetime = croniter(schedule, start).get_next(datetime.datetime)
    return following <= now


@dataclass
class Outcome:
    status: dict[str, Any] = field(default_factory=dict)  # merged into status.snapshots or status.restore
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    annotations: dict[str, str] = field(default_factory=dict)


HIBERNATION = "hibernation"  # the reason of the snapshot taken just before the pods stop
HIBERNATION_RETRY = datetime.timedelta(minutes=1)


def snapshot_wanted(spec: ClusterSpec, previous: Mapping[str, Any], now: datetime.datetime) -> str | None:
    """Why a snapshot should be taken in this pass ("hibernation", "requested" or "scheduled"), or None."""
    if spec.snapshots is None:
        return None
    if spec.hibernating and spec.hibernated_voters is None and HIBERNATION_SNAPSHOT_ANNOTATION not in spec.annotations:
        # Hibernation waits for this one; a failed attempt is tried again a minute later, not on every pass.
        last = parse_time(previous.get("lastAttemptTime"))
        if previous.get("consecutiveFailures") and last is not None and now - last < HIBERNATION_RETRY:
            return None
        return HIBERNATION
    request = spec.annotations.get(SNAPSHOT_REQUEST_ANNOTATION)
    if request and request != previous.get("lastRequest"):
        return "requested"
    since = parse_time(spec.creation_timestamp) or now
    if due(spec.snapshots.schedule, parse_time(previous.get("lastAttemptTime")), since, now):
        return "scheduled"
    return None


async def take_snapshot(
    client: SidecarClient, spec: ClusterSpec, previous: Mapping[str, Any], why: str, now: datetime.datetime
) -> Outcome:
    """Register the repository, take one snapshot, prune beyond retention; every failure is reported, once,
    in the status and an Event, and retried at the next scheduled time (or request)."""
    assert spec.snapshots is not None
    outcome = Outcome(status={"repository": REPOSITORY, "lastAttemptTime": format_time(now)})
    request = spec.annotations.get(SNAPSHOT_REQUEST_ANNOTATION)
    if request:
        outcome.status["lastRequest"] = request
    name = snapshot_name(spec.name, now)
    try:
        await client.put_repository(REPOSITORY, object_storage.snapshot_repository_body(spec, SNAPSHOT_DIR))
        info = await client.create_snapshot(REPOSITORY, name)
    except Exception as error:
        failures = int(previous.get("consecutiveFailures") or 0) + 1
        message = f"{why} snapshot [{name}] failed: {error}"
        outcome.status.update(
            lastFailure=message[:1000], lastFailureTime=format_time(now), consecutiveFailures=failures
        )
        outcome.events.append(("Warning", "SnapshotFailed", message[:1000]))
        return outcome
    outcome.status.update(
        lastSnapshot=info.name,
        lastSnapshotTime=format_time(now),
        lastSnapshotVersion=info.state_version,
        consecutiveFailures=0,
    )
    if why == HIBERNATION:
        outcome.annotations[HIBERNATION_SNAPSHOT_ANNOTATION] = info.name  # the cluster may now go to sleep
    outcome.events.append(
        (
            "Normal",
            "SnapshotTaken",
            f"{why} snapshot [{info.name}] of state version {info.state_version}: {info.keys} keys",
        )
    )
    try:
        listed = await client.list_snapshots(REPOSITORY)
        for old in to_prune(spec.name, listed, spec.snapshots.retention):
            await client.delete_snapshot(REPOSITORY, old)
            outcome.events.append(
                (
                    "Normal",
                    "SnapshotPruned",
                    f"deleted snapshot [{old}] beyond the retention of {spec.snapshots.retention}",
                )
            )
        outcome.status["retained"] = len(own_snapshots(spec.name, await client.list_snapshots(REPOSITORY)))
    except Exception as error:
        message = f"pruning snapshots beyond the retention of {spec.snapshots.retention} failed: {error}"
        outcome.status.update(lastFailure=message[:1000], lastFailureTime=format_time(now))
        outcome.events.append(("Warning", "SnapshotFailed", message[:1000]))
    return outcome


def restore_wanted(spec: ClusterSpec, previous_restore: Mapping[str, Any]) -> bool:
    """spec.restoreFrom names a snapshot that was never restored into this cluster (the status and an
    annotation both record it, so neither an operator restart nor a lost status restores twice)."""
    if spec.restore_from is None:
        return False
    return not (previous_restore.get("completed") or spec.annotations.get(RESTORED_FROM_ANNOTATION))


async def restore_once(
    client: SidecarClient, spec: ClusterSpec, previous_restore: Mapping[str, Any], now: datetime.datetime
) -> Outcome:
    assert spec.restore_from is not None
    snapshot = spec.restore_from
    outcome = Outcome(status={"snapshot": snapshot})
    try:
        await client.put_repository(REPOSITORY, object_storage.snapshot_repository_body(spec, SNAPSHOT_DIR))
        restored = await client.restore_snapshot(REPOSITORY, snapshot)
    except Exception as error:
        message = f"restoring snapshot [{snapshot}] failed: {error}"[:1000]
        outcome.status.update(completed=False, lastFailure=message, lastFailureTime=format_time(now))
        if previous_restore.get("lastFailure") != message:  # one Event per distinct failure, not per pass
            outcome.events.append(("Warning", "RestoreFailed", message))
        return outcome
    outcome.status.update(
        completed=True, restoredAt=format_time(now), version=restored.version, keys=restored.keys, lastFailure=None
    )
    outcome.annotations[RESTORED_FROM_ANNOTATION] = snapshot
    outcome.events.append(
        (
            "Normal",
            "SnapshotRestored",
            f"restored {restored.keys} keys from snapshot [{snapshot}] in state version {restored.version}",
        )
    )
    return outcome
