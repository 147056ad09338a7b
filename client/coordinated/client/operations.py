"""The client's calls as flows, each written once: `Client` and `AsyncClient` bind every function of
`__all__` as a method (a test checks that both bind exactly these). The docstrings are the methods'."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from coordinated.client import admin_calls, calls
from coordinated.client.base import ClientBase, perform
from coordinated.client.errors import ChangesGone
from coordinated.client.flow import Emit, Flow, Stream
from coordinated.client.models import KeyValue, SessionInfo, TxnResult, WatchBatch, WatchEvent, WriteResult

__all__ = [
    "add_voting_config_exclusions",
    "cas",
    "clear_voting_config_exclusions",
    "cluster_health",
    "cluster_settings",
    "cluster_state",
    "create",
    "create_session",
    "create_snapshot",
    "delete",
    "delete_snapshot",
    "end_session",
    "get",
    "keepalive",
    "list_snapshots",
    "node_info",
    "put",
    "put_cluster_settings",
    "put_fs_repository",
    "put_repository",
    "restore_snapshot",
    "sessions",
    "txn",
    "watch",
    "watch_once",
]

WATCH_TIMEOUT_S = 30.0

# -- keys ---------------------------------------------------------------------------------------------------


def get(client: ClientBase, key: str, *, local: bool = False) -> Flow[KeyValue]:
    """Linearizable unless `local` (this node's applied state). Raises NotFound."""
    return (yield from perform(client, calls.get(key, local)))


def put(client: ClientBase, key: str, value: Any, *, session: str | None = None) -> Flow[WriteResult]:
    """An unconditional write (retried if its outcome is unknown: writing the same value twice is harmless).
    With `session` the key is ephemeral: deleted when the session ends."""
    return (yield from perform(client, calls.put(key, value, session=session)))


def create(client: ClientBase, key: str, value: Any, *, session: str | None = None) -> Flow[WriteResult]:
    """Writes only if the key does not exist; raises VersionConflict if it does."""
    return (yield from perform(client, calls.put(key, value, create=True, session=session)))


def cas(client: ClientBase, key: str, value: Any, version: int, *, session: str | None = None) -> Flow[WriteResult]:
    """Writes only if the key's version is `version` (0: absent); raises VersionConflict otherwise."""
    return (yield from perform(client, calls.put(key, value, if_version=version, session=session)))


def delete(client: ClientBase, key: str, *, if_version: int | None = None) -> Flow[WriteResult]:
    """Deletes the key; with `if_version`, only if that is its version (VersionConflict otherwise)."""
    return (yield from perform(client, calls.delete(key, if_version=if_version)))


def txn(
    client: ClientBase,
    compare: Sequence[tuple[str, int]],
    success: Sequence[Mapping[str, Any]],
    failure: Sequence[Mapping[str, Any]] = (),
) -> Flow[TxnResult]:
    """All or nothing in one committed state; build ops with `put_op`, `delete_op`, `get_op`."""
    return (yield from perform(client, calls.txn(compare, success, failure)))


# -- watches ------------------------------------------------------------------------------------------------


def watch_once(
    client: ClientBase,
    prefix: str = "",
    after_version: int | None = None,
    *,
    timeout: float = WATCH_TIMEOUT_S,
    local: bool = False,
) -> Flow[WatchBatch]:
    """One long poll: the changes after `after_version` (None: from now), or none after `timeout`."""
    return (yield from perform(client, calls.watch(prefix, after_version, timeout, local)))


def next_events(
    client: ClientBase, prefix: str, after: int | None, *, timeout: float, local: bool = False
) -> Flow[tuple[list[WatchEvent], int]]:
    """The next changes under `prefix` and the version to resume from. A watch that fell behind the node's
    change log (410) re-reads the prefix instead: a `reset` event, then a `put` of every key there."""
    try:
        batch = yield from watch_once(client, prefix, after, timeout=timeout, local=local)
    except ChangesGone:
        version, values = yield from perform(client, calls.snapshot(prefix))
        return calls.reset_events(prefix, version, values), version
    return batch.events, batch.version


def watch(
    client: ClientBase,
    prefix: str = "",
    after_version: int | None = None,
    *,
    timeout: float = WATCH_TIMEOUT_S,
    local: bool = False,
) -> Stream[WatchEvent]:
    """Every change under `prefix`, for ever, resuming from the last version it reported, through any
    node. If it falls behind a node's change log (410) it re-reads the prefix and yields a `reset`
    event followed by a `put` of every key there."""
    after = after_version
    while True:
        events, after = yield from next_events(client, prefix, after, timeout=timeout, local=local)
        for event in events:
            yield Emit(event)


# -- sessions -----------------------------------------------------------------------------------------------


def create_session(client: ClientBase, ttl: float | None = None, *, node: str | None = None) -> Flow[SessionInfo]:
    """A session with a TTL in seconds (kept alive by `keepalive`), or bound to a node's membership."""
    return (yield from perform(client, calls.create_session(ttl, node)))


def keepalive(client: ClientBase, session_id: str) -> Flow[None]:
    """Raises SessionNotFound once the session has ended."""
    return (yield from perform(client, calls.keepalive(session_id)))


def end_session(client: ClientBase, session_id: str) -> Flow[None]:
    """Ends the session; its ephemeral keys are deleted in the same committed state."""
    return (yield from perform(client, calls.end_session(session_id)))


def sessions(client: ClientBase) -> Flow[Any]:
    """`{"version", "sessions": [{"id", "ttl" or "node", "keys"}]}`, from the master's state."""
    return (yield from perform(client, calls.list_sessions()))


# -- the admin API ------------------------------------------------------------------------------------------


def node_info(client: ClientBase) -> Flow[dict[str, Any]]:
    """`GET /`: `{"name", "node_id", "cluster_name", ...}` of the node the client is sent to. A node that lost its
    data comes back under a new `node_id`."""
    return (yield from perform(client, admin_calls.node_info()))


def cluster_health(
    client: ClientBase, *, wait_for_nodes: int | None = None, timeout: float = 30.0
) -> Flow[dict[str, Any]]:
    """`GET /_cluster/health`; with `wait_for_nodes`, once that many nodes have joined (or after `timeout`)."""
    return (yield from perform(client, admin_calls.cluster_health(wait_for_nodes, timeout)))


def cluster_state(client: ClientBase, *, local: bool = False) -> Flow[dict[str, Any]]:
    """`GET /_cluster/state`: from the master, or with `local` this node's applied state."""
    return (yield from perform(client, admin_calls.cluster_state(local)))


def cluster_settings(client: ClientBase) -> Flow[dict[str, Any]]:
    """`GET /_cluster/settings`: `{"persistent": {...}}`, the dynamic settings set on the cluster."""
    return (yield from perform(client, admin_calls.cluster_settings()))


def put_cluster_settings(client: ClientBase, persistent: Mapping[str, Any]) -> Flow[dict[str, Any]]:
    """Sets dynamic settings (docs/settings.md); a None value resets a setting to its default."""
    return (yield from perform(client, admin_calls.put_cluster_settings(persistent)))


def add_voting_config_exclusions(
    client: ClientBase, node_names: Sequence[str], *, timeout: float = 30.0
) -> Flow[dict[str, Any]]:
    """Excludes the nodes from the voting configuration; answers once they have left it."""
    return (yield from perform(client, admin_calls.add_voting_config_exclusions(node_names, timeout)))


def clear_voting_config_exclusions(
    client: ClientBase, *, wait_for_removal: bool = True, timeout: float = 30.0
) -> Flow[dict[str, Any]]:
    """Clears the exclusions; with `wait_for_removal`, once the excluded nodes have left the cluster."""
    return (yield from perform(client, admin_calls.clear_voting_config_exclusions(wait_for_removal, timeout)))


def put_repository(
    client: ClientBase, repository: str, repository_type: str, settings: Mapping[str, str]
) -> Flow[dict[str, Any]]:
    """Registers a snapshot repository of any type with its settings (an `s3` one: bucket, base_path, client)."""
    return (yield from perform(client, admin_calls.put_repository(repository, repository_type, settings)))


def put_fs_repository(client: ClientBase, repository: str, location: str) -> Flow[dict[str, Any]]:
    """Registers an `fs` snapshot repository at `location`, under the nodes' `path.repo`."""
    return (yield from perform(client, admin_calls.put_fs_repository(repository, location)))


def create_snapshot(client: ClientBase, repository: str, snapshot: str) -> Flow[dict[str, Any]]:
    """Writes the committed state to the repository and answers once it is complete."""
    return (yield from perform(client, admin_calls.create_snapshot(repository, snapshot)))


def list_snapshots(client: ClientBase, repository: str) -> Flow[dict[str, Any]]:
    """`{"snapshots": [...]}`: the repository's snapshots."""
    return (yield from perform(client, admin_calls.list_snapshots(repository)))


def delete_snapshot(client: ClientBase, repository: str, snapshot: str) -> Flow[dict[str, Any]]:
    return (yield from perform(client, admin_calls.delete_snapshot(repository, snapshot)))


def restore_snapshot(client: ClientBase, repository: str, snapshot: str) -> Flow[dict[str, Any]]:
    """Replaces the keys and settings with the snapshot's, in one committed state."""
    return (yield from perform(client, admin_calls.restore_snapshot(repository, snapshot)))
