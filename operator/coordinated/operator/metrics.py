"""Prometheus metrics of the operator itself, served by prometheus-client on their own port."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from coordinated.operator import certificates

RECONCILIATIONS = Counter(
    "coordinated_operator_reconciliations", "Reconciliations of CoordinatedCluster resources", ["result"]
)
FAILURES = Counter("coordinated_operator_reconcile_failures", "Reconciliations that raised an error", ["reason"])
DURATION = Histogram(
    "coordinated_operator_reconcile_duration_seconds",
    "Time spent in one reconciliation",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
ACTIONS = Counter("coordinated_operator_actions", "Planner actions carried out", ["kind"])
STUCK = Gauge(
    "coordinated_operator_stuck_reconciliations",
    "CoordinatedClusters that have not converged for longer than the stuck threshold",
)

LEADER = Gauge(
    "coordinated_operator_leader",
    "1 on the replica that holds the operator's Lease and reconciles, 0 on the others",
)

CERTIFICATE_EXPIRY = Gauge(
    "coordinated_operator_certificate_expiry_timestamp_seconds",
    "When each certificate the operator issued expires (Unix time): the cluster's CA (certificate=ca) and each pod's",
    ["namespace", "cluster", "certificate"],
)
_certificates_seen: dict[tuple[str, str], set[str]] = {}


def record_certificate_expiry(namespace: str, cluster: str, secret_data: Mapping[str, bytes]) -> None:
    """The expiry of every `*.crt` in a cluster's certificates Secret; series of certificates gone are dropped."""
    names = set()
    for key, pem in secret_data.items():
        if key.endswith(".crt"):
            name = key.removesuffix(".crt")
            names.add(name)
            CERTIFICATE_EXPIRY.labels(namespace, cluster, name).set(certificates.validity(pem)[1].timestamp())
    for gone in _certificates_seen.get((namespace, cluster), set()) - names:
        CERTIFICATE_EXPIRY.remove(namespace, cluster, gone)
    _certificates_seen[(namespace, cluster)] = names


def forget_cluster(namespace: str, cluster: str) -> None:
    """The cluster was deleted: its series go (a stale expiry would fire an alert for a cluster long gone)."""
    for name in _certificates_seen.pop((namespace, cluster), set()):
        CERTIFICATE_EXPIRY.remove(namespace, cluster, name)


def forget_clusters() -> None:
    """This replica stopped reconciling: the leader exports the clusters' series from now on."""
    for namespace, cluster in list(_certificates_seen):
        forget_cluster(namespace, cluster)


@dataclass
class ProgressTracker:
    """Remembers since when each cluster has been unconverged, to count the stuck ones."""

    stuck_after_seconds: float = 600.0
    unconverged_since: dict[str, float] = field(default_factory=dict)

    def observe(self, key: str, converged: bool, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if converged:
            self.unconverged_since.pop(key, None)
        else:
            self.unconverged_since.setdefault(key, now)
        STUCK.set(self.stuck_count(now))

    def forget(self, key: str) -> None:
        self.unconverged_since.pop(key, None)
        STUCK.set(self.stuck_count())

    def stuck_count(self, now: float | None = None) -> int:
        now = time.monotonic() if now is None else now
        return sum(1 for since in self.unconverged_since.values() if now - since >= self.stuck_after_seconds)


def serve(port: int) -> None:
    if port:
        start_http_server(port)
