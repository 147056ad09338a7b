"""The operator's view of one sidecar: `coordinated.client`'s admin calls, read into the operator's types.

All knowledge of the JSON shapes lives in the `parse_*` functions below, so a change in the sidecar's
answers is fixed here only. The operator reaches each pod directly (pod IP or headless DNS name).
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from coordinated.client import ApiError, AsyncClient, CoordinatedError
from coordinated.coordination.history import NO_CLUSTER_UUID

HTTP_PORT = 9200
# What the operator reads of a node's state (Elasticsearch's filter_path): everything parse_cluster_state uses. A
# sidecar of a release before filter_path answers its whole state instead, which parses the same.
MEMBERSHIP_FIELDS = "cluster_name,cluster_uuid,version,term,master_node,nodes,metadata.cluster_coordination"
TRANSPORT_PORT = 9300
T = TypeVar("T")


class SidecarError(Exception):
    """The sidecar could not be reached or gave an unexpected answer (`status`: its HTTP status, if any;
    `error_type`: the API's error type, such as `feature_not_available_exception`)."""

    def __init__(self, message: str, status: int | None = None, error_type: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type


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


class SidecarConnections:
    """How the operator reaches the sidecars, and the HTTP connections its calls share: one pool per CA and
    checked host name, so that a connection made for one pod's name is never reused for another's, and one
    TLS context per cluster CA. Close it when the operator stops.

    `url_template` fills in a pod's base URL (`sidecar_url`); `timeout_seconds` bounds each request."""

    def __init__(self, url_template: str = "{scheme}://{ip}:{port}", timeout_seconds: float = 3.0) -> None:
        self.url_template = url_template
        self.timeout_seconds = timeout_seconds
        self._pools: dict[tuple[ssl.SSLContext | None, str | None], httpx.AsyncClient] = {}
        self._trust: dict[bytes, ssl.SSLContext] = {}  # by CA certificate: one context per CA, not per pass

    def trusting(self, ca_pem: bytes | None) -> ssl.SSLContext | None:
        """The context that verifies a cluster's sidecars against its CA (None: the cluster has no TLS)."""
        if not ca_pem:
            return None
        if ca_pem not in self._trust:
            self._trust[ca_pem] = ca_ssl_context(ca_pem)
        return self._trust[ca_pem]

    def pool(self, access: SidecarAccess) -> httpx.AsyncClient:
        key = (access.ssl_context, access.server_hostname)
        if key not in self._pools:
            self._pools[key] = httpx.AsyncClient(verify=access.ssl_context or True)
        return self._pools[key]

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.aclose()

    async def __aenter__(self) -> SidecarConnections:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class SidecarClient:
    """One sidecar's client port, through `coordinated.client` (one attempt per call: the operator's next
    pass is its retry). Cheap to create; the connections are the shared `SidecarConnections`'."""

    def __init__(
        self,
        connections: SidecarConnections,
        base_url: str,
        timeout_seconds: float = 5.0,
        access: SidecarAccess = SidecarAccess(),
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = AsyncClient(
            self.base_url,
            http=connections.pool(access),
            token=access.token,
            server_hostname=access.server_hostname,
            request_timeout=timeout_seconds,
            retry_timeout=0,
            follow_master=False,
        )

    async def _answer(self, what: str, call: Awaitable[T]) -> T:
        try:
            return await call
        except ApiError as error:
            raise SidecarError(f"{what} on {self.base_url} answered {error}", error.status, error.type) from error
        except (CoordinatedError, KeyError, TypeError, ValueError) as error:
            raise SidecarError(f"{what} on {self.base_url} failed: {error}") from error

    async def cluster_state(self, local: bool = True) -> ClusterState:
        """The membership part of the node's state (`MEMBERSHIP_FIELDS`): never its keys or sessions, so that the
        operator's memory does not grow with the clusters' data."""
        call = self._client.cluster_state(local=local, filter_path=MEMBERSHIP_FIELDS)
        return parse_cluster_state(await self._answer("cluster state", call))

    async def node_id(self) -> str:
        """The node's own id (`GET /`): a node that lost its data comes back under a new one."""
        answer = await self._answer("node info", self._client.node_info())
        if not isinstance(answer, Mapping) or not answer.get("node_id"):
            raise SidecarError(f"GET {self.base_url}/ gave no node_id: {str(answer)[:200]}")
        return str(answer["node_id"])

    async def cluster_health(self) -> ClusterHealth:
        return parse_cluster_health(await self._answer("cluster health", self._client.cluster_health()))

    async def add_voting_config_exclusions(self, node_names: Sequence[str], timeout: float = 30.0) -> None:
        """Returns once the nodes have left the voting configuration (the sidecar waits up to `timeout`)."""
        call = self._client.add_voting_config_exclusions(node_names, timeout=timeout)
        await self._answer(f"voting config exclusions of {list(node_names)}", call)

    async def clear_voting_config_exclusions(self, wait_for_removal: bool) -> None:
        call = self._client.clear_voting_config_exclusions(wait_for_removal=wait_for_removal)
        await self._answer("clearing the voting config exclusions", call)

    # -- snapshots (an fs repository in the snapshot volume, or an s3 one) ------------------------------------------

    async def put_repository(self, repository: str, body: Mapping[str, Any]) -> None:
        """Register a repository: `{"type": "fs"|"s3", "settings": {...}}` as the snapshot API takes it."""
        call = self._client.put_repository(repository, body["type"], body["settings"])
        await self._answer(f"repository [{repository}]", call)

    async def create_snapshot(self, repository: str, snapshot: str) -> SnapshotInfo:
        answer = await self._answer(f"snapshot [{snapshot}]", self._client.create_snapshot(repository, snapshot))
        return parse_snapshot_info(answer["snapshot"])

    async def list_snapshots(self, repository: str) -> list[SnapshotInfo]:
        answer = await self._answer(f"snapshots of [{repository}]", self._client.list_snapshots(repository))
        return [parse_snapshot_info(entry) for entry in answer.get("snapshots") or ()]

    async def delete_snapshot(self, repository: str, snapshot: str) -> None:
        await self._answer(f"deleting snapshot [{snapshot}]", self._client.delete_snapshot(repository, snapshot))

    async def restore_snapshot(self, repository: str, snapshot: str) -> RestoreInfo:
        call = self._client.restore_snapshot(repository, snapshot)
        restored = (await self._answer(f"restoring snapshot [{snapshot}]", call))["snapshot"]
        return RestoreInfo(snapshot=snapshot, version=int(restored["version"]), keys=int(restored.get("keys", 0)))

    # -- access control (spec.access): the API's answers as they are ------------------------------------------

    async def roles(self) -> dict[str, Any]:
        return await self._answer("roles", self._client.roles())

    async def put_role(self, name: str, grants: Mapping[str, Sequence[str]], cluster: Sequence[str]) -> None:
        await self._answer(f"role [{name}]", self._client.put_role(name, grants, cluster))

    async def delete_role(self, name: str) -> None:
        await self._answer(f"deleting role [{name}]", self._client.delete_role(name))

    async def role_mappings(self) -> dict[str, Any]:
        return await self._answer("role mappings", self._client.role_mappings())

    async def put_role_mapping(self, name: str, roles: Sequence[str], principals: Sequence[str]) -> None:
        await self._answer(f"role mapping [{name}]", self._client.put_role_mapping(name, roles, principals))

    async def delete_role_mapping(self, name: str) -> None:
        await self._answer(f"deleting role mapping [{name}]", self._client.delete_role_mapping(name))

    async def quotas(self) -> dict[str, Any]:
        return await self._answer("quotas", self._client.quotas())

    async def put_quota(self, name: str, prefix: str, limits: Mapping[str, int], force: bool) -> None:
        call = self._client.put_quota(name, prefix, force=force, **limits)
        await self._answer(f"quota [{name}]", call)

    async def delete_quota(self, name: str) -> None:
        await self._answer(f"deleting quota [{name}]", self._client.delete_quota(name))


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
