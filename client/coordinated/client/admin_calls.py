"""The cluster's admin API as calls, beside the key-value calls of `calls.py`: health and state, voting-config
exclusions and snapshots. The answers are the API's JSON, as docs/sidecar.md gives it; exclusions and
snapshots need the `admin` role when tokens are on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from coordinated.client.calls import Call, Retry, duration, ok, segment

# The server may hold these calls up to their `timeout`; the client waits this much longer for the answer.
ANSWER_MARGIN_S = 10.0
# Writing or restoring a snapshot reads or writes the whole state on disk: give it this long on top.
SNAPSHOT_WAIT_S = 55.0
# Listing or deleting snapshots reads the repository's folder.
REPOSITORY_WAIT_S = 25.0


def node_info() -> Call[dict[str, Any]]:
    """`GET /`: the node this client is sent to (its name, node_id and cluster), answered without the master."""
    return Call("GET", "/", ok, master_timeout=False)


def cluster_health(wait_for_nodes: int | None = None, timeout_s: float = 30.0) -> Call[dict[str, Any]]:
    params = (
        {}
        if wait_for_nodes is None
        else {"wait_for_nodes": str(wait_for_nodes), "timeout": duration(timeout_s, "timeout")}
    )
    wait_s = 0.0 if wait_for_nodes is None else timeout_s
    # `timeout` is the wait for the nodes here; the server takes no `master_timeout` beside it.
    return Call("GET", "/_cluster/health", ok, params, wait_s=wait_s, master_timeout=wait_for_nodes is None)


def cluster_state(local: bool = False, filter_path: str | None = None) -> Call[dict[str, Any]]:
    """The whole cluster state; `local`: this node's applied state, without asking the master; `filter_path`:
    only these fields (for example `master_node,nodes,metadata.cluster_coordination`)."""
    params = {"local": "true"} if local else {}
    if filter_path is not None:
        params["filter_path"] = filter_path
    return Call("GET", "/_cluster/state", ok, params)


def cluster_settings() -> Call[dict[str, Any]]:
    """The persistent settings that the answering node has applied: `{"persistent": {...}}`."""
    return Call("GET", "/_cluster/settings", ok, master_timeout=False)


def put_cluster_settings(persistent: Mapping[str, Any]) -> Call[dict[str, Any]]:
    """Changes dynamic settings (a None value resets one); the answer holds the accepted settings. Writing
    the same values twice ends in the same state, so a lost answer may be retried."""
    return Call("PUT", "/_cluster/settings", ok, body={"persistent": dict(persistent)})


def add_voting_config_exclusions(node_names: Sequence[str], timeout_s: float = 30.0) -> Call[dict[str, Any]]:
    """Answers once the nodes have left the voting configuration (the server waits up to `timeout_s`)."""
    params = {"node_names": ",".join(node_names), "timeout": duration(timeout_s, "timeout")}
    # Asking again for exclusions the cluster holds already changes nothing.
    return Call(
        "POST",
        "/_cluster/voting_config_exclusions",
        ok,
        params,
        wait_s=timeout_s + ANSWER_MARGIN_S,
        master_timeout=False,
    )


def clear_voting_config_exclusions(wait_for_removal: bool = True, timeout_s: float = 30.0) -> Call[dict[str, Any]]:
    params = {"wait_for_removal": "true" if wait_for_removal else "false", "timeout": duration(timeout_s, "timeout")}
    return Call(
        "DELETE",
        "/_cluster/voting_config_exclusions",
        ok,
        params,
        wait_s=timeout_s + ANSWER_MARGIN_S,
        master_timeout=False,
    )


def put_repository(repository: str, repository_type: str, settings: Mapping[str, str]) -> Call[dict[str, Any]]:
    """Registers (or re-registers) a repository: `fs` with its `location`, or `s3` with its `bucket`, `base_path`
    and `client` (docs/sidecar.md)."""
    body = {"type": repository_type, "settings": dict(settings)}
    return Call("PUT", f"/_snapshot/{segment(repository)}", ok, body=body)


def put_fs_repository(repository: str, location: str) -> Call[dict[str, Any]]:
    """Registers an `fs` repository at `location` (under the nodes' `path.repo`)."""
    return put_repository(repository, "fs", {"location": location})


def create_snapshot(repository: str, snapshot: str) -> Call[dict[str, Any]]:
    """Waits for completion; the answer's `snapshot` describes it. A second create of one name is refused."""
    path = f"/_snapshot/{segment(repository)}/{segment(snapshot)}"
    params = {"wait_for_completion": "true"}
    return Call("PUT", path, ok, params, retry=Retry.NEVER_BLIND, wait_s=SNAPSHOT_WAIT_S)


def list_snapshots(repository: str) -> Call[dict[str, Any]]:
    return Call("GET", f"/_snapshot/{segment(repository)}/_all", ok, wait_s=REPOSITORY_WAIT_S)


def delete_snapshot(repository: str, snapshot: str) -> Call[dict[str, Any]]:
    path = f"/_snapshot/{segment(repository)}/{segment(snapshot)}"
    return Call("DELETE", path, ok, retry=Retry.NEVER_BLIND, wait_s=REPOSITORY_WAIT_S)


def restore_snapshot(repository: str, snapshot: str) -> Call[dict[str, Any]]:
    """Replaces the keys and settings with the snapshot's in one committed state."""
    path = f"/_snapshot/{segment(repository)}/{segment(snapshot)}/_restore"
    return Call("POST", path, ok, retry=Retry.NEVER_BLIND, wait_s=SNAPSHOT_WAIT_S)
