"""Leader election on a Lease (coordination.k8s.io/v1), as client-go's leaderelection does it for ECK, Strimzi and
CloudNativePG: several operator replicas run, one reconciles, and another takes over when it dies.

- A candidate takes the Lease when it is free, or when its holder has not renewed it for `lease_duration` as
  this candidate observed it (its own clock: the holder's renewTime is never compared with ours).
- The leader renews every `retry_period`; when it could not renew for `renew_deadline` (shorter than the lease
  duration) it steps down before any other replica may take over, so two replicas never reconcile at once.
- A leader that stops cleanly releases the Lease, and another replica takes over at once.

Every write names the Lease's resourceVersion, so of two candidates racing for a free Lease exactly one wins.
`decide` is the pure rule; `LeaderElection` runs it against the API server.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from coordinated.operator import metrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaseRecord:
    """A Lease's spec as stored (and its resourceVersion, for the next write)."""

    holder: str = ""
    lease_duration_seconds: int = 15
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0
    resource_version: str | None = None

    @classmethod
    def from_lease(cls, lease: dict[str, Any]) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=(lease.get("metadata") or {}).get("resourceVersion"),
        )

    def spec(self) -> dict[str, Any]:
        return {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.transitions,
        }

    def same_holding(self, other: LeaseRecord) -> bool:
        """The same holder with the same renewal: nothing happened between two reads."""
        return (self.holder, self.renew_time, self.acquire_time) == (other.holder, other.renew_time, other.acquire_time)


def micro_time(now: datetime.datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def decide(
    current: LeaseRecord | None,
    identity: str,
    lease_duration: float,
    observed_for: float,
    now: datetime.datetime,
) -> LeaseRecord | None:
    """The record to write to hold the Lease, or None when another holder still owns it.

    `observed_for`: for how long (this process's clock) `current` has been seen unchanged."""
    stamp = micro_time(now)
    duration = max(1, round(lease_duration))
    if current is None:
        return LeaseRecord(identity, duration, stamp, stamp, 0)
    if current.holder == identity:
        return replace(current, renew_time=stamp, lease_duration_seconds=duration)
    held_for = current.lease_duration_seconds or duration
    if current.holder and observed_for < held_for:
        return None
    return replace(
        current, holder=identity, lease_duration_seconds=duration, acquire_time=stamp, renew_time=stamp,
        transitions=current.transitions + 1,
    )  # fmt: skip


class LeaseConflict(Exception):
    """Someone else wrote the Lease since it was read."""


class LeaseStore:
    """The Lease's three API calls, in worker threads (the kubernetes client is blocking)."""

    def __init__(self, namespace: str, name: str) -> None:
        from kubernetes import client

        self.namespace, self.name = namespace, name
        self._api = client.CoordinationV1Api()

    def _read(self) -> LeaseRecord | None:
        import json

        from kubernetes.client.exceptions import ApiException

        try:
            response: Any = self._api.read_namespaced_lease(self.name, self.namespace, _preload_content=False)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return LeaseRecord.from_lease(json.loads(response.data))

    def _write(self, record: LeaseRecord, create: bool) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            if create:
                metadata = {"name": self.name, "namespace": self.namespace}
                body: Any = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata}
                lease: Any = {**body, "spec": record.spec()}
                self._api.create_namespaced_lease(self.namespace, lease)
            else:
                # A merge patch of the spec alone (the chart's labels stay), on the condition that the Lease is
                # still the one read: a resourceVersion in a patch is a precondition (409 when it changed).
                patch: Any = {"metadata": {"resourceVersion": record.resource_version}, "spec": record.spec()}
                self._api.patch_namespaced_lease(
                    self.name, self.namespace, patch, _content_type="application/merge-patch+json"
                )
        except ApiException as error:
            if error.status == 409:
                raise LeaseConflict(str(error.reason)) from error
            raise

    async def read(self) -> LeaseRecord | None:
        return await asyncio.to_thread(self._read)

    async def write(self, record: LeaseRecord, create: bool) -> None:
        await asyncio.to_thread(self._write, record, create)


def own_identity() -> str:
    """The pod's name (the hostname) and a suffix, so that a restarted container is another candidate."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


@dataclass
class Timing:
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


class LeaderElection:
    """Runs the election; `on_started` and `on_stopped` are called when this process becomes or stops being the
    leader. `leading` says which it is now."""

    def __init__(
        self,
        store: Any,
        identity: str,
        on_started: Callable[[], None],
        on_stopped: Callable[[], None],
        timing: Timing | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store, self.identity = store, identity
        self.timing = timing or Timing()
        self._on_started, self._on_stopped = on_started, on_stopped
        self._clock = clock
        self.leading = False
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0
        self._renewed_at = 0.0

    async def run(self) -> None:
        try:
            while True:
                await self._attempt()
                await asyncio.sleep(self.timing.retry_period)
        finally:
            if self.leading:
                self._step_down("the operator stops")

    async def _attempt(self) -> None:
        try:
            current = await self.store.read()
            now = self._clock()
            if current is None or self._observed is None or not current.same_holding(self._observed):
                self._observed, self._observed_at = current, now
            if self.leading and current is not None and current.holder != self.identity:
                self._step_down(f"{current.holder or 'nobody'} holds the Lease now")
            wanted = decide(
                current,
                self.identity,
                self.timing.lease_duration,
                now - self._observed_at,
                datetime.datetime.now(datetime.UTC),
            )
            if wanted is not None:
                await self.store.write(wanted, create=current is None)
                self._observed, self._observed_at, self._renewed_at = wanted, now, now
                if not self.leading:
                    self.leading = True
                    log.info("became the leader (Lease %s, as %s)", getattr(self.store, "name", "?"), self.identity)
                    metrics.LEADER.set(1)
                    self._on_started()
                return
        except LeaseConflict:
            log.debug("the Lease changed while this candidate wrote it")
        except Exception:  # the API server may be unreachable: the deadline below decides
            log.warning("could not read or write the Lease", exc_info=True)
        if self.leading and self._clock() - self._renewed_at >= self.timing.renew_deadline:
            self._step_down(f"the Lease was not renewed for {self.timing.renew_deadline:.0f}s")

    def _step_down(self, why: str) -> None:
        log.warning("stopped leading: %s", why)
        self.leading = False
        metrics.LEADER.set(0)
        self._on_stopped()

    async def release(self) -> None:
        """Gives the Lease up (on a clean stop), so that another replica takes over at once."""
        if not self.leading:
            return
        self._step_down("released on stop")
        try:
            current = await self.store.read()
            if current is not None and current.holder == self.identity:
                await self.store.write(replace(current, holder="", lease_duration_seconds=1), create=False)
        except Exception:
            log.warning("could not release the Lease", exc_info=True)
