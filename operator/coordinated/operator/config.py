"""What `coordinated operator`'s options set: one value, made before Kopf starts and kept in Kopf's memo.

The command line is parsed by `cli.py`, which hands the values to the operator's startup handler through the
process environment (`COORDINATED_OPERATOR_CONFIG`, JSON), because `kopf run` takes no memo; an operator
embedded with `kopf.operator(memo=kopf.Memo(config=OperatorConfig(...)))` passes it directly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import msgspec

ENVIRONMENT_VARIABLE = "COORDINATED_OPERATOR_CONFIG"
# The chart's `operator.reconcileInterval`, as an older chart sets it; an option set on the command line wins.
INTERVAL_VARIABLE = "COORDINATED_RECONCILE_INTERVAL"


@dataclass
class OperatorConfig:
    metrics_port: int = 8000
    # {scheme}, {ip}, {pod}, {service}, {namespace} and {port} are filled in; use DNS names when pod IPs are
    # unroutable. {scheme} is https when the cluster has TLS on.
    sidecar_url_template: str = "{scheme}://{ip}:{port}"
    sidecar_timeout_seconds: float = 3.0
    stuck_after_seconds: float = 600.0
    reconcile_interval_seconds: float = 15.0
    # Where the operator's own pods run, so each cluster's NetworkPolicy admits them to the client port.
    namespace: str | None = None
    pod_labels: dict[str, str] = field(default_factory=dict)
    # Several replicas elect one leader on a Lease of this name in `namespace` (None: every process reconciles,
    # which is right for a single one only).
    lease_name: str | None = None
    # Every cluster gets a PodMonitor for its sidecars (the Prometheus Operator's), unless its
    # spec.monitoring.podMonitor.enabled says otherwise; with these labels (for Prometheus's podMonitorSelector).
    pod_monitors: bool = False
    pod_monitor_labels: dict[str, str] = field(default_factory=dict)

    def to_environment(self) -> str:
        return msgspec.json.encode(self).decode()

    @classmethod
    def from_environment(cls, environ: os._Environ[str] | dict[str, str] | None = None) -> OperatorConfig:
        environ = os.environ if environ is None else environ
        encoded = environ.get(ENVIRONMENT_VARIABLE)
        config = msgspec.json.decode(encoded, type=cls) if encoded else cls()
        if not encoded and (interval := environ.get(INTERVAL_VARIABLE)):
            config.reconcile_interval_seconds = float(interval)
        return config
