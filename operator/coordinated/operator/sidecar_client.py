"""A small typed client for the sidecar's HTTP API.

All knowledge of the JSON shapes lives in the `parse_*` functions below, so a change in the sidecar's
answers is fixed here only. The operator reaches each pod directly (pod IP or headless DNS name).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from coordinated.coordination.history import NO_CLUSTER_UUID

HTTP_PORT = 9200
TRANSPORT_PORT = 9300


class SidecarError(Exception):
    """The sidecar could not be reached or gave an unexpected answer (`status`: its HTTP status, if any)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class NodeInfo:
    node_id: str
    name: str
    transport_address: str = ""
    roles: tuple[str, ...] = ("master",)

    @property
    def master_eligible(self) -> bool:
        return "master" in self.roles


@dataclass(frozen=True)
class ClusterState:
    """What one node knows about the cluster; names resolved from node ids through `nodes`."""

    cluster_name: str
    cluster_uuid: str | None  # None while the cluster is not bootstrapped
    term: int
    version: int
    master_id: str | None
    nodes: Mapping[str, NodeInfo] = field(default_factory=dict)
    committed_config_ids: tuple[str, ...] = ()
    accepted_config_ids: tuple[str, ...] = ()
    exclusion_names: tuple[str, ...] = ()

    def name_of(self, node_id: str) -> str:
        node = self.nodes.get(node_id)
        return node.name if node else node_id

    @property
    def master(self) -> str | None:
        return self.name_of(self.master_id) if self.master_id else None

    @property
    def node_names(self) -> frozenset[str]:
        return frozenset(node.name for node in self.nodes.values())

    @property
    def committed_voters(self) -> tuple[str, ...]:
        return tuple(sorted(self.name_of(node_id) for node_id in self.committed_config_ids))

    @property
    def accepted_voters(self) -> tuple[str, ...]:
        return tuple(sorted(self.name_of(node_id) for node_id in self.accepted_config_ids))


@dataclass(frozen=True)
class ClusterHealth:
    status: str  # green, yellow or red
    master_node: str | None
    number_of_nodes: int
    number_of_master_eligible_nodes: int
    formation_problem: str | None = None


# Elasticsearch reports "_na_" as the UUID of a cluster that has not been bootstrapped yet.
_UNKNOWN_UUIDS = {None, "", NO_CLUSTER_UUID}


def parse_cluster_state(body: Mapping[str, Any]) -> ClusterState:
    nodes = {
        node_id: NodeInfo(
            node_id=node_id,
            name=str(info.get("name", node_id)),
            transport_address=str(info.get("transport_address", "")),
            roles=tuple(info.get("roles", ("master",))),
        )
        for node_id, info in (body.get("nodes") or {}).items()
    }
    coordination = (body.get("metadata") or {}).get("cluster_coordination") or {}
    exclusions = tuple(
        str(entry.get("node_name") or entry.get("node_id")) if isinstance(entry, Mapping) else str(entry)
        for entry in coordination.get("voting_config_exclusions") or ()
    )
    uuid = body.get("cluster_uuid")
    return ClusterState(
        cluster_name=str(body.get("cluster_name", "")),
        cluster_uuid=None if uuid in _UNKNOWN_UUIDS else str(uuid),
        term=int(body.get("term", coordination.get("term", 0)) or 0),
        version=int(body.get("version", 0) or 0),
        master_id=body.get("master_node") or None,
        nodes=nodes,
        committed_config_ids=tuple(coordination.get("last_committed_config") or ()),
        accepted_config_ids=tuple(coordination.get("last_accepted_config") or ()),
        exclusion_names=tuple(sorted(exclusions)),
    )


def parse_cluster_health(body: Mapping[str, Any]) -> ClusterHealth:
    return ClusterHealth(
        status=str(body.get("status", "red")),
        master_node=body.get("master_node") or None,
        number_of_nodes=int(body.get("number_of_nodes", 0)),
        number_of_master_eligible_nodes=int(body.get("number_of_master_eligible_nodes", 0)),
        formation_problem=body.get("formation_problem") or None,
    )


@dataclass(frozen=True)
class SidecarAccess:
    """How the operator authenticates to a cluster's sidecars and verifies them.

    `ssl_context` trusts the cluster's CA only; the pod is reached at its IP and its certificate checked
    against `server_hostname`, its stable DNS name (certificates carry names, not the changing pod IPs).
    """

    token: str | None = None
    ssl_context: ssl.SSLContext | None = None
    server_hostname: str | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"


def ca_ssl_context(ca_pem: bytes) -> ssl.SSLContext:
    """Verification against the cluster's CA alone (not the system's), with host names checked."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class SidecarClient:
    """One sidecar's client port. Cheap to create; share the aiohttp session between clients."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        timeout_seconds: float = 5.0,
        access: SidecarAccess = SidecarAccess(),
    ) -> None:
        self._session = session
        self.base_url = base_url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self._access = access
        self._headers = {"Authorization": f"Bearer {access.token}"} if access.token else {}

    async def _request(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None = None,
        timeout: float | None = None,
        body: Any = None,
    ) -> Any:
        url = f"{self.base_url}{path}"
        request_timeout = aiohttp.ClientTimeout(total=timeout) if timeout else self._timeout
        try:
            async with self._session.request(
                method,
                url,
                params=params,
                json=body,
                timeout=request_timeout,
                headers=self._headers,
                ssl=self._access.ssl_context if self._access.ssl_context is not None else True,
                server_hostname=self._access.server_hostname,
            ) as response:
                if response.status >= 400:
                    text = await response.text()
                    raise SidecarError(f"{method} {url} answered {response.status}: {text[:300]}", response.status)
                if response.content_type == "application/json":
                    return await response.json()
                return await response.text()
        except (TimeoutError, aiohttp.ClientError, ValueError) as error:
            raise SidecarError(f"{method} {url} failed: {error!r}") from error

    async def cluster_state(self, local: bool = True) -> ClusterState:
        params = {"local": "true"} if local else None
        return parse_cluster_state(await self._request("GET", "/_cluster/state", params))

    async def cluster_health(self) -> ClusterHealth:
        return parse_cluster_health(await self._request("GET", "/_cluster/health"))

    async def add_voting_config_exclusions(self, node_names: Sequence[str], timeout: str = "30s") -> None:
        """Returns once the nodes have left the voting configuration (the sidecar waits up to `timeout`)."""
        params = {"node_names": ",".join(node_names), "timeout": timeout}
        await self._request("POST", "/_cluster/voting_config_exclusions", params, timeout=45)

    async def clear_voting_config_exclusions(self, wait_for_removal: bool) -> None:
        params = {"wait_for_removal": "true" if wait_for_removal else "false"}
        await self._request("DELETE", "/_cluster/voting_config_exclusions", params, timeout=45)

    # -- snapshots (an fs repository in the snapshot volume, or an s3 one) ------------------------------------------

    async def put_repository(self, repository: str, body: Mapping[str, Any]) -> None:
        """Register a repository: `{"type": "fs"|"s3", "settings": {...}}` as the snapshot API takes it."""
        await self._request("PUT", f"/_snapshot/{repository}", body=dict(body))

    async def create_snapshot(self, repository: str, snapshot: str) -> SnapshotInfo:
        params = {"wait_for_completion": "true"}
        answer = await self._request("PUT", f"/_snapshot/{repository}/{snapshot}", params, timeout=60)
        return parse_snapshot_info(answer["snapshot"])

    async def list_snapshots(self, repository: str) -> list[SnapshotInfo]:
        answer = await self._request("GET", f"/_snapshot/{repository}/_all", timeout=30)
        return [parse_snapshot_info(entry) for entry in answer.get("snapshots") or ()]

    async def delete_snapshot(self, repository: str, snapshot: str) -> None:
        await self._request("DELETE", f"/_snapshot/{repository}/{snapshot}", timeout=30)

    async def restore_snapshot(self, repository: str, snapshot: str) -> RestoreInfo:
        answer = await self._request("POST", f"/_snapshot/{repository}/{snapshot}/_restore", timeout=60)
        restored = answer["snapshot"]
        return RestoreInfo(snapshot=snapshot, version=int(restored["version"]), keys=int(restored.get("keys", 0)))


@dataclass(frozen=True)
class SnapshotInfo:
    name: str
    state: str  # SUCCESS, or FAILED for a damaged file
    start_time_in_millis: int
    state_version: int | None = None  # the cluster-state version the snapshot holds
    keys: int | None = None


@dataclass(frozen=True)
class RestoreInfo:
    snapshot: str
    version: int  # the committed state that holds the restored keys
    keys: int


def parse_snapshot_info(body: Mapping[str, Any]) -> SnapshotInfo:
    version = body.get("state_version")
    keys = body.get("keys")
    return SnapshotInfo(
        name=str(body["snapshot"]),
        state=str(body.get("state", "SUCCESS")),
        start_time_in_millis=int(body.get("start_time_in_millis") or 0),
        state_version=None if version is None else int(version),
        keys=None if keys is None else int(keys),
    )


def sidecar_url(template: str, *, pod: str, ip: str | None, service: str, namespace: str, scheme: str = "http") -> str:
    """The base URL of one pod's sidecar; the template (an operator option) picks IP or DNS addressing.

    `{scheme}` is http or https as the cluster's TLS says; a template written with a fixed `http://` is
    switched to https too, so an older option value keeps working when TLS is turned on.
    """
    url = template.format(pod=pod, ip=ip or "", service=service, namespace=namespace, port=HTTP_PORT, scheme=scheme)
    if scheme == "https" and url.startswith("http://"):
        url = "https://" + url[len("http://") :]
    return url
