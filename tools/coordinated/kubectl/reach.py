"""A CoordinatedCluster's sidecars as the command-line client reaches them: every pod through a port-forward, with
the token of the cluster's Secret for the role the command needs (none when `spec.auth.enabled` is false)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from coordinated.ctl.connection import Preset
from coordinated.ctl.failures import Unreachable
from coordinated.kubectl.kube import Kube, NotFound
from coordinated.kubectl.tunnel import http_client, pod_address


def auth_enabled(resource: dict[str, Any]) -> bool:
    return ((resource.get("spec") or {}).get("auth") or {}).get("enabled", True) is not False


def token_for(kube: Kube, resource: dict[str, Any], role: str) -> str | None:
    if not auth_enabled(resource):
        return None
    name = resource["metadata"]["name"]
    try:
        return kube.token(name, role)
    except NotFound as missing:
        # Without the token nothing can be asked: the "not authorised" exit code, not a failed operation.
        raise Unreachable(f"{missing.message}: the operator creates it with the cluster's tokens") from missing


@contextlib.contextmanager
def sidecars(kube: Kube, cluster: str, role: str) -> Iterator[tuple[dict[str, Any], Preset]]:
    """The cluster's resource, and the Preset that reaches its pods; the port-forwards close on exit."""
    resource = kube.cluster(cluster)
    pods = kube.pod_names(cluster)
    if not pods:
        phase = (resource.get("status") or {}).get("phase", "unknown")
        raise Unreachable(f"CoordinatedCluster {kube.namespace}/{cluster} has no pods (phase {phase})")
    token = token_for(kube, resource, role)
    with http_client(kube.api, kube.namespace) as http:
        yield resource, Preset([pod_address(pod) for pod in pods], token, http)
