"""Elasticsearch's snapshot API with its `fs` and `s3` repository types (docs/sidecar.md, Snapshots).

Repositories are cluster-state metadata (registered through the master), so every node knows them; the
node that serves a snapshot request reads or writes the repository itself (`SnapshotRepository`: files in a
worker thread, or objects on the node's object store thread). A snapshot holds
the state this node has applied after a read barrier, that is a committed state at least as new as every
write acknowledged before the request: one immutable state, so a consistent cut whatever is written
meanwhile. A restore is one master task, decided and committed atomically.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import msgspec
from aiohttp import web

from coordinated.coordination.client import ClusterError
from coordinated.coordination.history import EventType, HistoryEvent
from coordinated.coordination.object_names import parse_base_path
from coordinated.coordination.requests.snapshots import (
    DeleteRepository,
    PutRepository,
    RestoreSnapshot,
    repository_problem,
)
from coordinated.coordination.state import ClusterState, Repository
from coordinated.coordination.state_events import state_event
from coordinated.coordination.validation import snapshot_name_problem
from coordinated.s3.s3_settings import DEFAULT_CLIENT, S3ClientSettings, client_names
from coordinated.sidecar.features import snapshots
from coordinated.sidecar.features.snapshot_fs import FsRepository, location_problem
from coordinated.sidecar.features.snapshot_s3 import S3Repository
from coordinated.sidecar.features.snapshot_settings import PATH_REPO
from coordinated.sidecar.features.snapshots import (
    RepositoryUnavailable,
    SnapshotCorrupt,
    SnapshotFile,
    SnapshotRepository,
)
from coordinated.sidecar.node import Node
from coordinated.sidecar.web import api_types as t
from coordinated.sidecar.web.app_keys import node_of
from coordinated.sidecar.web.errors import BadRequest, FeatureNotAvailable, error_response, result_error
from coordinated.sidecar.web.inputs import no_body, param_bool, read_json, timeout_of
from coordinated.sidecar.web.privileges import Privilege
from coordinated.sidecar.web.reads import read_barrier
from coordinated.sidecar.web.routes import (
    BOOLEAN,
    LOCAL,
    MASTER_TIMEOUT,
    TIMEOUTS,
    WRITE_ERRORS,
    Param,
    Query,
    Route,
    Routes,
)

routes = Routes()
WAIT_FOR_COMPLETION = Param("wait_for_completion", BOOLEAN, "answer when the work is done")


def _name(request: web.Request, part: str, what: str) -> str:
    name = request.match_info[part]
    problem = snapshot_name_problem(name, what)
    if problem is not None:
        error_type = "repository_exception" if what == "repository" else "invalid_snapshot_name_exception"
        raise BadRequest(problem, error_type)
    return name


def _roots(node: Node) -> tuple[str, ...]:
    return node.status().settings[PATH_REPO] or ()


def _repository_exception(repo: str, reason: str, status: int = 400) -> BadRequest:
    return BadRequest(f"[{repo}] {reason}", "repository_exception", status)


def _missing_snapshot(repo: str, snap: str) -> web.Response:
    return error_response("snapshot_missing_exception", f"[{repo}:{snap}] is missing", 404)


def repository_of(node: Node, repo: str, registered: Repository) -> SnapshotRepository:
    """The repository a registration names, as this node reaches it: a directory under its `path.repo`, or a bucket
    through its `s3.client.NAME` settings. Raises BadRequest when this node cannot use it."""
    if registered.type == "s3":
        if registered.client != DEFAULT_CLIENT and registered.client not in client_names(node.status().settings):
            raise _repository_exception(
                repo,
                f"unknown s3 client [{registered.client}]: set s3.client.{registered.client}.* on every node "
                "(this node has none)",
            )
        client = S3ClientSettings.from_settings(node.status().settings, registered.client)
        return S3Repository(node.snapshot_bucket(client, registered.bucket), registered.base_path)
    location, outside = location_problem(registered.location, _roots(node))
    if outside is not None:
        raise _repository_exception(repo, outside)
    return FsRepository(location)


async def _repository(node: Node, repo: str, timeout_ms: int) -> SnapshotRepository | web.Response:
    """The registered repository, after a read barrier (so a repository registered through any node is known);
    an error response if it is not registered."""
    problem = await read_barrier(node, timeout_ms)
    if problem is not None:
        return problem
    registered = node.keys.applied_state.repositories.get(repo)
    if registered is None:
        return error_response("repository_missing_exception", f"[{repo}] missing", 404)
    return repository_of(node, repo, registered)


def _unavailable(repo: str, error: RepositoryUnavailable, snap: str | None = None) -> web.Response:
    where = f"{repo}:{snap}" if snap else repo
    return error_response("repository_exception", f"[{where}] {error}", 500)


def _millis_to_iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def snapshot_info(repo: str, snapshot: SnapshotFile) -> dict[str, Any]:
    """Elasticsearch's SnapshotInfo shape, with the cluster state the snapshot holds."""
    return {
        "snapshot": snapshot.snapshot,
        "uuid": snapshot.uuid,
        "repository": repo,
        "state": "SUCCESS",
        "include_global_state": True,
        "start_time": _millis_to_iso(snapshot.start_time_in_millis),
        "start_time_in_millis": snapshot.start_time_in_millis,
        "end_time": _millis_to_iso(snapshot.end_time_in_millis),
        "end_time_in_millis": snapshot.end_time_in_millis,
        "duration_in_millis": snapshot.end_time_in_millis - snapshot.start_time_in_millis,
        "failures": [],
        "cluster_name": snapshot.cluster_name,
        "cluster_uuid": snapshot.cluster_uuid,
        "state_term": snapshot.term,
        "state_version": snapshot.version,
        "keys": len(snapshot.kv),
        "sessions": len(snapshot.sessions),
        "persistent_settings": len(snapshot.persistent_settings),
    }


def _damaged_info(repo: str, name: str, error: SnapshotCorrupt, mtime: float) -> dict[str, Any]:
    ms = int(mtime * 1000)
    return {
        "snapshot": name,
        "repository": repo,
        "state": "FAILED",
        "start_time_in_millis": ms,
        "end_time_in_millis": ms,
        "failures": [str(error)],
    }


def _state_event(node: Node, event_type: EventType, state: ClusterState, name: str) -> HistoryEvent:
    status = node.status()
    return state_event(event_type, status.node_id, status.node_name, state, snapshot=name)


# -- repositories ---------------------------------------------------------------------------------------


def _repository_body(repo: Repository) -> dict[str, Any]:
    if repo.type == "s3":
        return {"type": "s3", "settings": {"bucket": repo.bucket, "base_path": repo.base_path, "client": repo.client}}
    return {"type": repo.type, "settings": {"location": repo.location}}


@routes.add(
    Route(
        "GET",
        "/_snapshot/{repo}",
        "One snapshot repository.",
        Privilege.MANAGE,
        dict[str, t.RepositoryAnswer],
        params=(LOCAL, MASTER_TIMEOUT),
        errors=(400, 404, 503),
    )
)
@routes.add(
    Route(
        "GET",
        "/_snapshot",
        "Every snapshot repository.",
        Privilege.MANAGE,
        dict[str, t.RepositoryAnswer],
        params=(LOCAL, MASTER_TIMEOUT),
        errors=(400, 503),
    )
)
async def repositories_get(request: web.Request, query: Query) -> web.StreamResponse:
    timeout_ms = timeout_of(query)  # checked even with `local`, which does not wait for the master
    node = node_of(request)
    if not param_bool(query, "local", False):
        problem = await read_barrier(node, timeout_ms)
        if problem is not None:
            return problem
    registered = node.keys.applied_state.repositories
    wanted = request.match_info.get("repo")
    if wanted is None or wanted in ("_all", "*"):
        return web.json_response({name: _repository_body(repo) for name, repo in sorted(registered.items())})
    if wanted not in registered:
        return error_response("repository_missing_exception", f"[{wanted}] missing", 404)
    return web.json_response({wanted: _repository_body(registered[wanted])})


FS_SETTINGS = {"location", "compress"}
S3_SETTINGS = {"bucket", "base_path", "client", "compress"}
REPOSITORY_BODY = (
    'a repository is {"type": "fs", "settings": {"location": "..."}} or '
    '{"type": "s3", "settings": {"bucket": "...", "base_path": "...", "client": "default"}}'
)


def _put_request(node: Node, repo: str, body: Any) -> PutRepository:
    """The registration a `PUT /_snapshot/{repo}` body asks for; BadRequest naming what is wrong."""
    if not isinstance(body, dict) or not set(body) <= {"type", "settings"}:
        raise _repository_exception(repo, REPOSITORY_BODY)
    kind, settings = body.get("type"), body.get("settings") or {}
    if not isinstance(settings, dict) or not all(isinstance(v, str | bool) for v in settings.values()):
        raise _repository_exception(repo, REPOSITORY_BODY)
    if kind == "s3":
        if not set(settings) <= S3_SETTINGS:
            raise _repository_exception(
                repo, "the s3 repository settings are [bucket], [base_path] and [client] (and [compress], ignored)"
            )
        if not settings.get("bucket"):
            raise _repository_exception(repo, "missing bucket")
        try:
            base_path = parse_base_path(str(settings.get("base_path") or ""))
        except ValueError as error:
            raise _repository_exception(repo, f"invalid [base_path]: {error}") from None
        client = str(settings.get("client") or DEFAULT_CLIENT)
        return PutRepository(repo, "s3", bucket=str(settings["bucket"]), base_path=base_path, client=client)
    if not set(settings) <= FS_SETTINGS:
        raise _repository_exception(repo, "the fs repository settings are [location] (and [compress], ignored)")
    location = settings.get("location")
    if kind == "fs" and (not isinstance(location, str) or not location):
        raise _repository_exception(repo, "missing location")
    resolved = str(location or "")
    if kind == "fs":
        path, outside = location_problem(resolved, _roots(node))
        if outside is not None:
            raise _repository_exception(repo, outside)
        resolved = str(path)
    return PutRepository(repo, str(kind), resolved)


# Taken with PUT or POST, as Elasticsearch does.
@routes.add(
    Route(
        ("PUT", "POST"),
        "/_snapshot/{repo}",
        "Register an `fs` snapshot repository under one of the nodes' `path.repo` roots.",
        Privilege.MANAGE,
        t.Acknowledged,
        params=(*TIMEOUTS, Param("verify", BOOLEAN, "check first that this node can write there; default true")),
        body=t.RepositoryBody,
        errors=(*WRITE_ERRORS, 500),
    )
)
async def repository_put(request: web.Request, query: Query) -> web.StreamResponse:
    repo = _name(request, "repo", "repository")
    timeout_ms = timeout_of(query)
    node = node_of(request)
    put = _put_request(node, repo, await read_json(request))
    problem = repository_problem(put)
    if problem is not None:
        raise _repository_exception(repo, problem.removeprefix(f"[{repo}] "))
    if param_bool(query, "verify", True):
        registered = Repository(put.type, put.location, put.bucket, put.base_path, put.client)
        try:
            await repository_of(node, repo, registered).verify()
        except RepositoryUnavailable as error:
            return error_response("repository_verification_exception", f"[{repo}] {error}", 500)
    result = await node.call(put, timeout_ms)
    if isinstance(result, ClusterError):
        return result_error(result)
    return web.json_response({"acknowledged": True})


@routes.add(
    Route(
        "DELETE",
        "/_snapshot/{repo}",
        "Unregister a snapshot repository (its files stay).",
        Privilege.MANAGE,
        t.Acknowledged,
        params=TIMEOUTS,
        errors=(400, 404, 503),
    )
)
async def repository_delete(request: web.Request, query: Query) -> web.StreamResponse:
    repo = _name(request, "repo", "repository")
    timeout_ms = timeout_of(query)
    await no_body(request)
    result = await node_of(request).call(DeleteRepository(repo), timeout_ms)
    if isinstance(result, ClusterError):
        return result_error(result)
    return web.json_response({"acknowledged": True})


# -- snapshots ------------------------------------------------------------------------------------------


@routes.add(
    Route(
        ("PUT", "POST"),
        "/_snapshot/{repo}/{snap}",
        "Take a snapshot of the committed state.",
        Privilege.MANAGE,
        t.SnapshotCreated,
        params=(WAIT_FOR_COMPLETION, *TIMEOUTS),
        body=t.SnapshotBody,
        body_required=False,
        errors=(400, 404, 408, 413, 500, 503),
    )
)
async def snapshot_create(request: web.Request, query: Query) -> web.StreamResponse:
    repo = _name(request, "repo", "repository")
    snap = _name(request, "snap", "snapshot")
    wait = param_bool(query, "wait_for_completion", False)
    timeout_ms = timeout_of(query)
    body = await read_json(request, required=False)
    if body is not None and (not isinstance(body, dict) or not set(body) <= {"include_global_state", "metadata"}):
        raise BadRequest("a snapshot of the cluster state takes no body other than [include_global_state]")
    node = node_of(request)
    repository = await _repository(node, repo, timeout_ms)
    if isinstance(repository, web.Response):
        return repository
    start_ms = int(time.time() * 1000)
    state = node.keys.applied_state  # committed, and immutable: the snapshot is one version's state
    snapshot = snapshots.snapshot_of(state, snap, start_ms, start_ms)
    try:
        end_ms = max(start_ms, int(time.time() * 1000))
        snapshot = msgspec.structs.replace(snapshot, end_time_in_millis=end_ms)
        await repository.write(snapshot, node.snapshot_secret())
    except snapshots.SnapshotExists:
        reason = f"[{repo}:{snap}] Invalid snapshot name [{snap}], snapshot with the same name already exists"
        return error_response("invalid_snapshot_name_exception", reason, 400)
    except RepositoryUnavailable as error:
        return error_response("snapshot_exception", f"[{repo}:{snap}] {error}", 500)
    node.record_history(_state_event(node, EventType.SNAPSHOT_TAKEN, state, f"{repo}:{snap}"))
    if not wait:
        return web.json_response({"accepted": True})
    written = await _read(node, repository, repo, snap)
    if isinstance(written, web.Response):
        return written
    return web.json_response({"snapshot": snapshot_info(repo, written)})


@routes.add(
    Route(
        "GET",
        "/_snapshot/{repo}/{snap}",
        "One snapshot, or every one with `_all` or `*`.",
        Privilege.MANAGE,
        t.SnapshotsAnswer,
        params=(
            *TIMEOUTS,
            Param("ignore_unavailable", BOOLEAN, "accepted and ignored"),
            Param("verbose", BOOLEAN, "accepted and ignored"),
        ),
        errors=(400, 404, 500, 503),
    )
)
async def snapshot_get(request: web.Request, query: Query) -> web.StreamResponse:
    for name in ("ignore_unavailable", "verbose"):  # accepted for Elasticsearch's clients: no effect
        param_bool(query, name, False)
    repo = _name(request, "repo", "repository")
    wanted = request.match_info["snap"]
    node = node_of(request)
    repository = await _repository(node, repo, timeout_of(query))
    if isinstance(repository, web.Response):
        return repository
    if wanted in ("_all", "*"):
        try:
            listed = await repository.list(node.snapshot_secret())
        except RepositoryUnavailable as error:
            return _unavailable(repo, error)
        infos = [
            snapshot_info(repo, entry) if isinstance(entry, SnapshotFile) else _damaged_info(repo, name, entry, mtime)
            for name, entry, mtime in listed
        ]
        return web.json_response({"snapshots": infos, "total": len(infos), "remaining": 0})
    snap = _name(request, "snap", "snapshot")
    loaded = await _read(node, repository, repo, snap)
    if isinstance(loaded, web.Response):
        return loaded
    return web.json_response({"snapshots": [snapshot_info(repo, loaded)], "total": 1, "remaining": 0})


async def _read(node: Node, repository: SnapshotRepository, repo: str, snap: str) -> SnapshotFile | web.Response:
    try:
        return await repository.read(snap, node.snapshot_secret())
    except snapshots.SnapshotMissing:
        return _missing_snapshot(repo, snap)
    except snapshots.SnapshotNewer as error:  # written by a newer release: not damaged, and not for this one
        return error_response("snapshot_restore_exception", f"[{repo}:{snap}] {error}", 400)
    except SnapshotCorrupt as error:
        return error_response("corrupt_state_exception", f"[{repo}:{snap}] {error}", 500)
    except RepositoryUnavailable as error:
        return _unavailable(repo, error, snap)


@routes.add(
    Route(
        "DELETE",
        "/_snapshot/{repo}/{snap}",
        "Delete a snapshot's file.",
        Privilege.MANAGE,
        t.Acknowledged,
        params=TIMEOUTS,
        errors=(400, 404, 503),
    )
)
async def snapshot_delete(request: web.Request, query: Query) -> web.StreamResponse:
    repo = _name(request, "repo", "repository")
    snap = _name(request, "snap", "snapshot")
    await no_body(request)
    node = node_of(request)
    repository = await _repository(node, repo, timeout_of(query))
    if isinstance(repository, web.Response):
        return repository
    try:
        await repository.remove(snap)
    except snapshots.SnapshotMissing:
        return _missing_snapshot(repo, snap)
    except RepositoryUnavailable as error:
        return _unavailable(repo, error, snap)
    return web.json_response({"acknowledged": True})


def _restore_options(body: Any) -> None:
    if body is None:
        return
    if not isinstance(body, dict) or not set(body) <= {"include_global_state"}:
        raise BadRequest("a restore of the cluster state takes no body other than [include_global_state: true]")
    if body.get("include_global_state", True) is not True:
        raise BadRequest("[include_global_state] must be true: a snapshot holds only the global state")


@routes.add(
    Route(
        "POST",
        "/_snapshot/{repo}/{snap}/_restore",
        "Replace the keys and persistent settings with a snapshot's, in one committed state.",
        Privilege.MANAGE,
        t.RestoreAnswer,
        params=(WAIT_FOR_COMPLETION, *TIMEOUTS),
        body=t.RestoreBody,
        body_required=False,
        errors=(400, 404, 408, 413, 500, 503),
    )
)
async def snapshot_restore(request: web.Request, query: Query) -> web.StreamResponse:
    repo = _name(request, "repo", "repository")
    snap = _name(request, "snap", "snapshot")
    param_bool(query, "wait_for_completion", False)  # a restore is one committed state: always complete
    timeout_ms = timeout_of(query)
    _restore_options(await read_json(request, required=False))
    node = node_of(request)
    repository = await _repository(node, repo, timeout_ms)
    if isinstance(repository, web.Response):
        return repository
    loaded = await _read(node, repository, repo, snap)
    if isinstance(loaded, web.Response):
        return loaded
    security = None if loaded.security is msgspec.UNSET else loaded.security
    if security is not None and (off := node.access_control_off()) is not None:
        raise FeatureNotAvailable(
            f"[{repo}:{snap}] holds roles, role mappings and quotas, which need access control: {off}"
        )
    admins = node.authentication is not None and bool(node.authentication.file_admins())
    restore = RestoreSnapshot(
        snapshot=f"{repo}:{snap}",
        snapshot_version=loaded.version,
        kv=loaded.kv,
        kv_versions=loaded.kv_versions,
        persistent_settings=loaded.persistent_settings,
        security=security,
        file_admins=admins,
    )
    result = await node.call(restore, timeout_ms)
    if isinstance(result, ClusterError):
        if result.status == 400:
            # The snapshot's content is what is wrong: say so, naming the file.
            reason = f"[{repo}:{snap}] cannot restore snapshot file [{repository.where(snap)}]: {result.reason}"
            return error_response("snapshot_restore_exception", reason, 400)
        return result_error(result)
    await node.keys.wait_for_version(result.version, timeout_ms / 1000)
    applied = node.keys.applied_state
    event = _state_event(node, EventType.SNAPSHOT_RESTORED, applied, f"{repo}:{snap}")
    if applied.version != result.version:  # this node has moved on (or not yet got there): name the version
        event = msgspec.structs.replace(event, term=result.term, version=result.version, state_uuid=None)
        event = msgspec.structs.replace(event, parent_uuid=None, master=None)
    node.record_history(event)
    return web.json_response(
        {
            "snapshot": {
                "snapshot": snap,
                "repository": repo,
                "indices": [],
                "shards": {"total": 0, "failed": 0, "successful": 0},
                "keys": len(loaded.kv),
                "version": result.version,
                "term": result.term,
            },
        }
    )
