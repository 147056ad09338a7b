"""The clients of one cluster's sidecars: each pod's, and the one that coordinates (the master, else any)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from coordinated.operator import manifests
from coordinated.operator.observation import ClusterView, Observation, PodObservation, summarize_states
from coordinated.operator.reconcile.context import Secured
from coordinated.operator.sidecar_client import (
    ClusterHealth,
    ClusterState,
    SidecarAccess,
    SidecarClient,
    SidecarConnections,
    SidecarError,
    sidecar_url,
)
from coordinated.operator.spec import ClusterSpec


def client(
    http: SidecarConnections, spec: ClusterSpec, pod: PodObservation, secured: Secured | None = None
) -> SidecarClient:
    access = SidecarAccess()
    if secured is not None:
        context = http.trusting(secured.ca_pem)
        hostname = manifests.pod_dns_name(spec, pod.name) if context is not None else None
        access = SidecarAccess(token=secured.token, ssl_context=context, server_hostname=hostname)
    url = sidecar_url(
        http.url_template,
        pod=pod.name,
        ip=pod.ip,
        service=manifests.headless_service_name(spec),
        namespace=spec.namespace,
        scheme=access.scheme,
    )
    return SidecarClient(http, url, timeout_seconds=http.timeout_seconds, access=access)


def coordinator(
    http: SidecarConnections, spec: ClusterSpec, obs: Observation, secured: Secured | None = None
) -> SidecarClient:
    """The sidecar to send voting-config changes to: the master, else any that answered."""
    candidates = [obs.cluster.master, *sorted(obs.cluster.reachable)]
    for name in candidates:
        if name and (pod := obs.pods.get(name)) is not None and pod.ip:
            return client(http, spec, pod, secured)
    raise SidecarError("no sidecar is reachable to change the voting configuration")


async def observe_sidecars(
    http: SidecarConnections,
    spec: ClusterSpec,
    pods: Mapping[str, PodObservation],
    secured: Secured | None = None,
) -> ClusterView:
    clients = {name: client(http, spec, pod, secured) for name, pod in pods.items() if pod.ip}

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
