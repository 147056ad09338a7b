"""The snapshot requests that change the cluster state: register and remove a repository, and restore a
snapshot; each type with what the core does with it (base.Action). The node that serves a snapshot request reads
and writes the repository itself; the master only registers repositories and commits a restore."""

from __future__ import annotations

from typing import Any

from coordinated.coordination import client
from coordinated.coordination.batch_draft import Draft, Result, first_oversized, state_too_large_error
from coordinated.coordination.batch_keys import state_entries_size
from coordinated.coordination.batch_writes import EVERY_KEY
from coordinated.coordination.client import ClientRequest, Committed
from coordinated.coordination.counters import CEILING
from coordinated.coordination.object_names import parse_base_path, parse_bucket, parse_client_name
from coordinated.coordination.offline_recovery import UNSAFE_BOOTSTRAP_SETTING
from coordinated.coordination.requests.base import Action, Runs
from coordinated.coordination.settings import SettingsError, SettingsRegistry
from coordinated.coordination.state import KeyVersion, Long, Repository
from coordinated.coordination.validation import (
    REPOSITORY_TYPES,
    metadata_key_problem,
    snapshot_name_problem,
    value_problem,
)


class PutRepository(ClientRequest[Committed], frozen=True, tag="put_repository"):
    """Register (or re-register) a snapshot repository. The node that receives the request checks the
    location against its `path.repo` (`fs`) or its S3 client (`s3`); the master checks the name, the type and
    the type's settings."""

    name: str
    type: str
    location: str = ""  # fs
    bucket: str = ""  # s3
    base_path: str = ""  # s3
    client: str = ""  # s3


class DeleteRepository(ClientRequest[Committed], frozen=True, tag="delete_repository"):
    name: str


class RestoreSnapshot(ClientRequest[Committed], frozen=True, tag="restore"):
    """Replace every key (with its versions) and every persistent setting in one committed state.

    The new state's version is above `snapshot_version` and every restored key version, so that versions
    (and the fencing tokens built on them) keep increasing across a restore, even into a new cluster."""

    snapshot: str  # `repo:snap`, for messages
    snapshot_version: Long
    kv: dict[str, Any]
    kv_versions: dict[str, KeyVersion]
    persistent_settings: dict[str, str]


def repository_problem(request: PutRepository) -> str | None:
    problem = snapshot_name_problem(request.name, "repository")
    if problem is not None:
        return problem
    if request.type not in REPOSITORY_TYPES:
        return f"[{request.name}] repository type [{request.type}] does not exist; the supported types are {list(REPOSITORY_TYPES)}"
    if request.type == "fs":
        if request.bucket or request.base_path or request.client:
            return f"[{request.name}] an fs repository takes [location] only, not [bucket], [base_path] or [client]"
        if not request.location.startswith("/"):
            return f"[{request.name}] location [{request.location}] must be an absolute path"
        return None
    if request.location:
        return f"[{request.name}] an s3 repository takes [bucket], [base_path] and [client], not [location]"
    for setting, value, parse in (
        ("bucket", request.bucket, parse_bucket),
        ("base_path", request.base_path, parse_base_path),
        ("client", request.client, parse_client_name),
    ):
        try:
            parse(value)
        except ValueError as error:
            return f"[{request.name}] invalid [{setting}]: {error}"
    return None


def restore_problem(request: RestoreSnapshot, registry: SettingsRegistry, current_version: int) -> str | None:
    """Every key named well, with consistent versions, and every setting valid: a damaged or hand-edited
    snapshot must not commit what the API would refuse. Its versions must also leave the cluster room to count
    on: no higher than the cluster's own version or `counters.CEILING`, whichever is higher (the restored
    state's version is one above them, and the nodes take it from the master as any publication). A node-level
    setting that an older version persisted is kept, and ignored, as it is in a running cluster."""
    if set(request.kv) != set(request.kv_versions):
        return f"snapshot [{request.snapshot}] does not give versions for exactly its keys"
    highest = max(current_version, CEILING)
    if request.snapshot_version > highest:
        return (
            f"snapshot [{request.snapshot}] is of version [{request.snapshot_version}], beyond the highest version "
            f"a restore may bring [{highest}]"
        )
    for key, versions in request.kv_versions.items():
        problem = metadata_key_problem(key) or value_problem(key, request.kv.get(key))
        if problem is not None:
            return f"snapshot [{request.snapshot}]: {problem}"
        if not 1 <= versions.create_version <= versions.version <= request.snapshot_version:
            return f"snapshot [{request.snapshot}]: key [{key}] has inconsistent versions (version [{versions.version}], create_version [{versions.create_version}])"
    # The node tool's marker of an unsafe bootstrap is a fact about the snapshot's cluster, not a setting.
    settings = {k: v for k, v in request.persistent_settings.items() if k != UNSAFE_BOOTSTRAP_SETTING}
    try:
        registry.validate_persisted(settings)
    except SettingsError as error:
        return f"snapshot [{request.snapshot}]: {error}"
    return None


def _put_repository(request: PutRepository, draft: Draft) -> Result:
    registered = Repository(request.type, request.location, request.bucket, request.base_path, request.client)
    draft.repositories = {**draft.repositories, request.name: registered}
    return None


PUT_REPOSITORY = Action(
    PutRepository,
    Runs.MASTER,
    validate=lambda request, state, settings: repository_problem(request),
    execute=_put_repository,
)


def _delete_repository(request: DeleteRepository, draft: Draft) -> Result:
    if request.name not in draft.repositories:
        return client.repository_missing_error(request.name)
    draft.repositories = {name: repo for name, repo in draft.repositories.items() if name != request.name}
    return None


DELETE_REPOSITORY = Action(
    DeleteRepository,
    Runs.MASTER,
    validate=lambda request, state, settings: snapshot_name_problem(request.name, "repository"),
    execute=_delete_repository,
)


def _restore_too_large(restore: RestoreSnapshot, size_now: int | None, limit: int) -> client.ClusterError | None:
    if size_now is None:
        return None
    restored = state_entries_size(restore.kv)
    return state_too_large_error(size_now, restored, limit) if restored > max(limit, size_now) else None


def _oversized_restored_value(restore: RestoreSnapshot, limit: int) -> client.ClusterError | None:
    """A restored key is held to `cluster.metadata.max_value_size` as a write of it would be."""
    oversized = first_oversized(restore.kv.items(), limit)
    if oversized is None:
        return None
    return client.bad_request(f"snapshot [{restore.snapshot}]: {oversized.reason}")


def _restore_snapshot(request: RestoreSnapshot, draft: Draft) -> Result:
    context = draft.context
    refused = _oversized_restored_value(request, context.max_value_size) or _restore_too_large(
        request, draft.keys.size, context.max_state_size
    )
    if refused is None:
        draft.keys.replace_all(request.kv, request.kv_versions)
        draft.settings = dict(request.persistent_settings)
    return refused


RESTORE = Action(
    RestoreSnapshot,
    Runs.MASTER,
    validate=lambda request, state, settings: restore_problem(request, settings.registry, state.version),
    execute=_restore_snapshot,
    # Versions (and the fencing tokens built on them) keep increasing across a restore, even into a new cluster.
    writes_keys=lambda request: EVERY_KEY,
    version_floor=lambda request: max(request.snapshot_version, *(v.version for v in request.kv_versions.values())),
)

ACTIONS: tuple[Action[Any], ...] = (PUT_REPOSITORY, DELETE_REPOSITORY, RESTORE)
