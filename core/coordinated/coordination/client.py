"""Requests that applications make of the cluster, and their results.

A request submitted on any node is forwarded to the master; the result comes back to the node it was
submitted on. Errors carry Elasticsearch's error type names and HTTP status codes.

Every request type is a `ClientRequest[R]`, where R is what it answers when it does not fail with a
`ClusterError`, so that a shell's `call(request)` is typed by the request. The request types live beside what
the core does with them, one domain per module of `coordinated.coordination.requests` (keys, transactions,
sessions, cluster, snapshots).
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Annotated, Any, Generic, TypeVar, cast

import msgspec

from coordinated.coordination.state import Long

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)  # a request that answers a Committed answers a Committed or an error


class ClientRequest(msgspec.Struct, Generic[R_co], frozen=True, tag_field="op"):
    """A request of a client; each type has a `tag` of its own (its name on the wire)."""


DEFAULT_REQUEST_TIMEOUT_MS = 30_000  # a client request without a timeout of its own

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


@functools.cache
def answer_types(request_type: type[ClientRequest[Any]]) -> tuple[type, ...]:
    """What a request type answers with when it does not fail: the `R` of its `ClientRequest[R]` base."""
    for base in getattr(request_type, "__orig_bases__", ()):
        if typing.get_origin(base) is ClientRequest:
            (answer,) = typing.get_args(base)
            return typing.get_args(answer) if isinstance(answer, types.UnionType) else (answer,)
    raise TypeError(f"{request_type.__name__} does not name what it answers: declare it as ClientRequest[Answer]")


def checked_result(request: ClientRequest[R], result: ClientResult) -> R | ClusterError:
    """`result` if it is an error or what `request` answers with; otherwise an internal error that names both."""
    if isinstance(result, (ClusterError, *answer_types(type(request)))):
        return cast("R | ClusterError", result)  # checked just above: an R or an error
    reason = f"unexpected result {type(result).__name__} to {type(request).__name__}"
    return ClusterError("internal_server_exception", reason, 500, maybe_applied=True)  # it did answer


# A request that needs a feature not every node of the cluster has yet (feature_gates).
FEATURE_NOT_AVAILABLE = "feature_not_available_exception"


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
