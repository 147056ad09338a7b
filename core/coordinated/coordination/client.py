"""Requests that applications make of the cluster, and their results.

A request submitted on any node is forwarded to the master; the result comes back to the node it was
submitted on. Errors carry Elasticsearch's error type names and HTTP status codes.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from coordinated.coordination.state import KeyVersion, Long


class _Request(msgspec.Struct, frozen=True, tag_field="op"):
    pass


class KvPut(_Request, frozen=True, tag="put"):
    """With `if_version`, applies only if the key's version is that (0: only if the key does not exist).
    With `session`, the key is ephemeral: it ends with that session. Without, it is persistent. With
    `prev_value`, the answer carries the key as it was before the write."""

    key: str
    value: Any
    if_version: Long | None = None
    session: str | None = None
    prev_value: bool = False


class KvDelete(_Request, frozen=True, tag="delete"):
    key: str
    if_version: Long | None = None
    prev_value: bool = False


class KvDeletePrefix(_Request, frozen=True, tag="delete_prefix"):
    """The keys whose name starts with `prefix` (every key if it is empty), in key order, in one committed state:
    at most `limit` of them (`MAX_PREFIX_DELETE` from this release's nodes), and the result says whether any is
    left (`more`). None: every one, as the previous release's nodes ask (their request has no `limit`, and
    their master ignores it: see `UNGATED_WIRE_ADDITIONS`)."""

    prefix: str
    limit: Long | None = None


class KvGet(_Request, frozen=True, tag="get"):
    """A linearizable read: served by the master once it has confirmed its leadership with a quorum."""

    key: str


class ReadBarrier(_Request, frozen=True, tag="barrier"):
    """The master's applied (term, version), confirmed like a KvGet: a node that has applied that version
    serves a state that includes every write acknowledged before the barrier was asked for."""


CompareOp = Literal["=", "!=", "<", ">"]


class TxnCompare(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """Compares one of the key's `version`, `create_version` (both 0 when the key does not exist) or `value`
    (false for any `op` when the key does not exist) with the given one; exactly one is given. Values are
    equal when their JSON encodings with sorted object keys are; `<` and `>` hold between two numbers or two
    strings, never between values of other types."""

    key: str
    version: Long | msgspec.UnsetType = msgspec.UNSET
    create_version: Long | msgspec.UnsetType = msgspec.UNSET
    value: Any | msgspec.UnsetType = msgspec.UNSET
    op: CompareOp = "="


class TxnOp(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    op: Literal["put", "delete", "get", "delete_prefix"]
    key: str = ""  # every op's but delete_prefix's
    value: Any | msgspec.UnsetType = msgspec.UNSET  # a put's value (which may be null)
    session: str | None = None  # a put's session: the key is ephemeral
    prefix: str | None = None  # a delete_prefix's
    prev_value: bool = False  # a put's or a delete's result carries the key as it was before


class Txn(_Request, frozen=True, tag="txn"):
    """If every compare holds, the success ops run, otherwise the failure ops: all in one committed state. Each
    `delete_prefix` op deletes at most `delete_limit` keys (as `KvDeletePrefix.limit`)."""

    compare: tuple[TxnCompare, ...] = ()
    success: tuple[TxnOp, ...] = ()
    failure: tuple[TxnOp, ...] = ()
    delete_limit: Long | None = None


MAX_TXN_OPS = 64
# The most keys one prefix delete (or one `delete_prefix` op of a transaction) deletes in one committed state;
# `more` in its result says that keys are left, and the caller calls again. A publication that deletes 100,000
# keys held every other write behind it for seconds; 1,000 hold it for tens of milliseconds.
MAX_PREFIX_DELETE = 1_000

# Fields this release added to requests and results that a node of the previous release ignores (msgspec skips
# unknown fields of these structs), so they need no gate on the cluster's version: sent to a previous-release
# master, a limited prefix delete deletes every key in one go, as that release always did, and answers without
# `more` (read as false). The one place that names them, for the version gates to come.
UNGATED_WIRE_ADDITIONS: tuple[tuple[str, str], ...] = (
    ("KvDeletePrefix", "limit"),
    ("Txn", "delete_limit"),
    ("Committed", "more"),
    ("TxnOpResult", "more"),
)


class SessionCreate(_Request, frozen=True, tag="session_create"):
    """A TTL session (`ttl_ms`), or a session bound to the membership of the node named `node_name`."""

    ttl_ms: Long = 0
    node_name: str | None = None


class SessionKeepAlive(_Request, frozen=True, tag="session_keepalive"):
    """Renews a TTL session on the master, which confirms its leadership first; no publication."""

    session: str


class SessionEnd(_Request, frozen=True, tag="session_end"):
    session: str


# TTL bounds. The lower one keeps a session above the time a master needs to notice a keepalive at all; the
# upper one (Consul's) keeps an abandoned session from holding its keys for days.
MIN_SESSION_TTL_MS = 1_000
MAX_SESSION_TTL_MS = 86_400_000
MAX_SESSIONS = 10_000  # in the cluster state at once


class UpdateSettings(_Request, frozen=True, tag="settings"):
    """Dynamic settings; a value of None resets the setting to its default."""

    persistent: dict[str, str | None]


class AddVotingConfigExclusions(_Request, frozen=True, tag="add_exclusions"):
    node_names: tuple[str, ...] = ()
    node_ids: tuple[str, ...] = ()


class ClearVotingConfigExclusions(_Request, frozen=True, tag="clear_exclusions"):
    """Clear all exclusions; with wait_for_removal, only once every excluded node has left the cluster."""

    wait_for_removal: bool = True


class PutRepository(_Request, frozen=True, tag="put_repository"):
    """Register (or re-register) a snapshot repository. The node that receives the request checks the
    location against its `path.repo` (`fs`) or its S3 client (`s3`); the master checks the name, the type and
    the type's settings."""

    name: str
    type: str
    location: str = ""  # fs
    bucket: str = ""  # s3
    base_path: str = ""  # s3
    client: str = ""  # s3


class DeleteRepository(_Request, frozen=True, tag="delete_repository"):
    name: str


class RestoreSnapshot(_Request, frozen=True, tag="restore"):
    """Replace every key (with its versions) and every persistent setting in one committed state.

    The new state's version is above `snapshot_version` and every restored key version, so that versions
    (and the fencing tokens built on them) keep increasing across a restore, even into a new cluster."""

    snapshot: str  # `repo:snap`, for messages
    snapshot_version: Long
    kv: dict[str, Any]
    kv_versions: dict[str, KeyVersion]
    persistent_settings: dict[str, str]


ClientRequest = (
    KvPut
    | KvDelete
    | KvDeletePrefix
    | KvGet
    | ReadBarrier
    | Txn
    | UpdateSettings
    | AddVotingConfigExclusions
    | ClearVotingConfigExclusions
    | SessionCreate
    | SessionKeepAlive
    | SessionEnd
    | PutRepository
    | DeleteRepository
    | RestoreSnapshot
)
LinearizableRead = KvGet | ReadBarrier
# The requests that answer with a Committed (or a ClusterError).
CommittingRequest = (
    KvPut
    | KvDelete
    | KvDeletePrefix
    | ReadBarrier
    | UpdateSettings
    | AddVotingConfigExclusions
    | ClearVotingConfigExclusions
    | PutRepository
    | DeleteRepository
    | RestoreSnapshot
)
WRITE_REQUESTS = (
    KvPut,
    KvDelete,
    KvDeletePrefix,
    Txn,
    UpdateSettings,
    AddVotingConfigExclusions,
    ClearVotingConfigExclusions,
    SessionCreate,
    SessionEnd,
    PutRepository,
    DeleteRepository,
    RestoreSnapshot,
)


DEFAULT_REQUEST_TIMEOUT_MS = 30_000  # a client request without a timeout of its own


class _Result(msgspec.Struct, frozen=True, tag_field="result"):
    pass


class PrevKey(msgspec.Struct, frozen=True):
    """A key as it was before a write that asked for it (`prev_value`)."""

    value: Any
    version: Long
    create_version: Long
    session: str | None = None


class Committed(_Result, frozen=True, tag="committed", omit_defaults=True):
    """A write (or, for a ReadBarrier, the state read) is committed and applied on the master, in this state.
    A write that asked for `prev_value` carries the key as it was (`prev`; None: it did not exist); a prefix
    delete carries how many keys it deleted."""

    term: Long
    version: Long
    prev: PrevKey | msgspec.UnsetType | None = msgspec.UNSET
    deleted: Long | msgspec.UnsetType = msgspec.UNSET
    more: bool = False  # a prefix delete that reached its limit: keys are left under the prefix


class ReadValue(_Result, frozen=True, tag="value"):
    key: str
    found: bool
    value: Any
    term: Long
    version: Long  # of the state read
    key_version: Long = 0  # of the write that last changed the key (0: not found)
    create_version: Long = 0  # of the write that created the key
    session: str | None = None  # an ephemeral key's session


class TxnOpResult(msgspec.Struct, frozen=True):
    """A put: the key's new versions. A delete: whether the key existed. A get: the key as the txn saw it. A
    delete_prefix (`key` holds the prefix): how many keys it deleted (`deleted`), and whether any is left (`more`). A put or delete that asked
    for `prev_value`: the key as it was (`prev`; None: it did not exist)."""

    op: str
    key: str
    found: bool = True
    value: Any = None
    version: Long = 0
    create_version: Long = 0
    deleted: Long = 0
    prev: PrevKey | msgspec.UnsetType | None = msgspec.UNSET
    more: bool = False  # a delete_prefix that reached the transaction's `delete_limit`: keys are left


class TxnResult(_Result, frozen=True, tag="txn"):
    succeeded: bool
    term: Long
    version: Long  # of the state the transaction was applied in (or read, if it wrote nothing)
    results: tuple[TxnOpResult, ...]

    def wrote(self) -> bool:
        return any((result.op in ("put", "delete") and result.found) or result.deleted > 0 for result in self.results)


class SessionInfo(_Result, frozen=True, tag="session"):
    """A session created or renewed, as of the master's state (term, version), with the time it has left by
    the master's clock (a TTL session; 0 for a node session)."""

    id: str
    ttl_ms: Long
    node: str | None
    term: Long
    version: Long
    remaining_ms: Long = 0


class ClusterError(_Result, frozen=True, tag="error"):
    type: str
    reason: str
    status: Annotated[int, msgspec.Meta(ge=400, le=599)]  # an HTTP error status, whatever a peer sends
    # False when the request is known not to have taken effect; True when it might have.
    maybe_applied: bool = False

    def to_api(self) -> dict[str, Any]:
        return error_body(self.type, self.reason, self.status)


def error_body(error_type: str, reason: str, status: int) -> dict[str, Any]:
    """Elasticsearch's error shape, the only place it is built: `{"error": {"type", "reason"}, "status"}`."""
    return {"error": {"type": error_type, "reason": reason}, "status": status}


ClientResult = Committed | ReadValue | TxnResult | SessionInfo | ClusterError


# What each request answers with when it does not fail with a ClusterError: the typed contract the shells rely on.
# The sidecar's `Node.call` says the same in its overloads, for the type checker; typing cannot derive one from the
# other, so tests/sidecar/test_call_result_types.py fails when they disagree.
RESULT_TYPES: dict[type, tuple[type, ...]] = {
    KvPut: (Committed,),
    KvDelete: (Committed,),
    KvDeletePrefix: (Committed,),
    KvGet: (ReadValue,),
    ReadBarrier: (Committed,),
    Txn: (TxnResult,),
    UpdateSettings: (Committed,),
    AddVotingConfigExclusions: (Committed,),
    ClearVotingConfigExclusions: (Committed,),
    SessionCreate: (SessionInfo, Committed),
    SessionKeepAlive: (SessionInfo, Committed),
    SessionEnd: (SessionInfo, Committed),
    PutRepository: (Committed,),
    DeleteRepository: (Committed,),
    RestoreSnapshot: (Committed,),
}


def checked_result(request: ClientRequest, result: ClientResult) -> ClientResult:
    """`result` if it is an error or what `request` answers with; otherwise an internal error that names both."""
    if isinstance(result, (ClusterError, *RESULT_TYPES[type(request)])):
        return result
    reason = f"unexpected result {type(result).__name__} to {type(request).__name__}"
    return ClusterError("internal_server_exception", reason, 500, maybe_applied=True)  # it did answer


NO_MASTER_BLOCKS = ("all", "write", "metadata_write")  # what `cluster.no_master_block` may refuse


def no_master_error(block: str) -> ClusterError:
    return ClusterError(
        type="cluster_block_exception",
        reason=f"blocked by: [SERVICE_UNAVAILABLE/2/no master]; no_master_block is [{block}]",
        status=503,
    )


def not_master_error(reason: str, maybe_applied: bool = False) -> ClusterError:
    return ClusterError(type="not_master_exception", reason=reason, status=503, maybe_applied=maybe_applied)


def failed_publication_error(reason: str) -> ClusterError:
    # The state may still be committed by the next master, which re-publishes its last-accepted state.
    return ClusterError(type="failed_to_commit_cluster_state_exception", reason=reason, status=503, maybe_applied=True)


def timeout_error(reason: str) -> ClusterError:
    return ClusterError(type="process_cluster_event_timeout_exception", reason=reason, status=503)


def version_conflict_error(key: str, expected: int, current: int) -> ClusterError:
    """A conditional write whose condition does not hold; `current` is 0 when the key does not exist."""
    if expected == 0:
        reason = f"[{key}]: version conflict, document already exists (current version [{current}])"
    elif current == 0:
        reason = f"[{key}]: version conflict, required version [{expected}], but no document was found"
    else:
        reason = f"[{key}]: version conflict, required version [{expected}], current version [{current}]"
    return ClusterError(type="version_conflict_engine_exception", reason=reason, status=409)


def session_not_found_error(session: str) -> ClusterError:
    return ClusterError(
        type="resource_not_found_exception",
        reason=f"session [{session}] not found: it has ended or never existed",
        status=404,
    )


def repository_missing_error(name: str) -> ClusterError:
    return ClusterError(type="repository_missing_exception", reason=f"[{name}] missing", status=404)


def bad_request(reason: str) -> ClusterError:
    return ClusterError(type="illegal_argument_exception", reason=reason, status=400)
