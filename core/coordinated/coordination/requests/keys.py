"""The key requests: put, delete, prefix delete, get, and the read barrier; each type with what the core does
with it (base.Action)."""

from __future__ import annotations

from typing import Any

from coordinated.coordination import client
from coordinated.coordination.batch_draft import Draft, Result
from coordinated.coordination.client import ClientRequest, ClientResult, Committed, ReadValue
from coordinated.coordination.requests.base import Action, Runs
from coordinated.coordination.settings import Settings
from coordinated.coordination.state import ClusterState, Long
from coordinated.coordination.validation import (
    key_prefix_problem,
    metadata_key_problem,
    session_id_problem,
    stored_key_problem,
    value_problem,
)

# -- put and delete -----------------------------------------------------------------------------------------


class KvPut(ClientRequest[Committed], frozen=True, tag="put"):
    """With `if_version`, applies only if the key's version is that (0: only if the key does not exist).
    With `session`, the key is ephemeral: it ends with that session. Without, it is persistent. With
    `prev_value`, the answer carries the key as it was before the write."""

    key: str
    value: Any
    if_version: Long | None = None
    session: str | None = None
    prev_value: bool = False


class KvDelete(ClientRequest[Committed], frozen=True, tag="delete"):
    key: str
    if_version: Long | None = None
    prev_value: bool = False


def _put_problem(request: KvPut, state: ClusterState, settings: Settings) -> str | None:
    problem = metadata_key_problem(request.key) or value_problem(request.key, request.value)
    if problem is None and request.session is not None:
        problem = session_id_problem(request.session)
    return problem


def _stored_key_problem(request: KvDelete | KvGet, state: ClusterState, settings: Settings) -> str | None:
    return stored_key_problem(request.key, state)


def _put_or_delete(request: KvPut | KvDelete, draft: Draft) -> Result:
    # Decided against the state this batch builds, so of two conflicting conditional writes in one batch only
    # the first applies.
    keys = draft.keys
    current = keys.version(request.key)
    prev = Committed(0, 0, prev=keys.previous(request.key)) if request.prev_value else None
    if request.if_version is not None and request.if_version != current:
        return client.version_conflict_error(request.key, request.if_version, current)
    if isinstance(request, KvDelete):
        keys.delete(request.key)
        return prev
    if request.session is not None and request.session not in keys.sessions:
        return client.session_not_found_error(request.session)
    keys.put(request.key, request.value, request.session)
    return prev


def _keyed(request: KvPut | KvDelete | KvGet) -> str:
    return f"{type(request).__name__} [{request.key}]"


def _unconditional_key(request: KvPut | KvDelete) -> tuple[str, ...] | None:
    """An unconditional write changes its key whatever the state; a conditional one may be refused in its batch."""
    return (request.key,) if request.if_version is None else None


PUT = Action(
    KvPut,
    Runs.MASTER,
    validate=_put_problem,
    execute=_put_or_delete,
    confirm_unwritten=True,
    writes_values=lambda request: ((request.key, request.value),),
    writes_keys=_unconditional_key,
    describe=_keyed,
)
DELETE = Action(
    KvDelete,
    Runs.MASTER,
    validate=_stored_key_problem,
    execute=_put_or_delete,
    confirm_unwritten=True,
    writes_keys=_unconditional_key,
    describe=_keyed,
)


# -- prefix delete ------------------------------------------------------------------------------------------


class KvDeletePrefix(ClientRequest[Committed], frozen=True, tag="delete_prefix"):
    """The keys whose name starts with `prefix` (every key if it is empty), in key order, in one committed state:
    at most `limit` of them (`MAX_PREFIX_DELETE` from this release's nodes), and the result says whether any is
    left (`more`). None: every one, as the previous release's nodes ask (their request has no `limit`, and
    their master ignores it: see `client.UNGATED_WIRE_ADDITIONS`)."""

    prefix: str
    limit: Long | None = None


# The most keys one prefix delete (or one `delete_prefix` op of a transaction) deletes in one committed state;
# `more` in its result says that keys are left, and the caller calls again. A publication that deletes 100,000
# keys held every other write behind it for seconds; 1,000 hold it for tens of milliseconds.
MAX_PREFIX_DELETE = 1_000


def _delete_prefix(request: KvDeletePrefix, draft: Draft) -> Result:
    deleted, more = draft.keys.delete_prefix(request.prefix, request.limit)
    return Committed(0, 0, deleted=deleted, more=more)


DELETE_PREFIX = Action(
    KvDeletePrefix,
    Runs.MASTER,
    validate=lambda request, state, settings: key_prefix_problem(request.prefix),
    execute=_delete_prefix,
    confirm_unwritten=True,
    describe=lambda request: f"KvDeletePrefix [{request.prefix}]",
)


# -- reads --------------------------------------------------------------------------------------------------


class KvGet(ClientRequest[ReadValue], frozen=True, tag="get"):
    """A linearizable read: served by the master once it has confirmed its leadership with a quorum."""

    key: str


def _read_key(request: KvGet, state: ClusterState) -> ClientResult:
    versions = state.key_version(request.key)
    return ReadValue(
        key=request.key,
        found=versions is not None,
        value=state.kv.get(request.key),
        term=state.term,
        version=state.version,
        key_version=versions.version if versions else 0,
        create_version=versions.create_version if versions else 0,
        session=state.kv_sessions.get(request.key),
    )


GET = Action(KvGet, Runs.READ, validate=_stored_key_problem, read=_read_key)


class ReadBarrier(ClientRequest[Committed], frozen=True, tag="barrier"):
    """The master's applied (term, version), confirmed like a KvGet: a node that has applied that version
    serves a state that includes every write acknowledged before the barrier was asked for."""


def barrier_answer(state: ClusterState) -> ClientResult:
    return Committed(state.term, state.version)


BARRIER = Action(ReadBarrier, Runs.READ, read=lambda request, state: barrier_answer(state))

ACTIONS: tuple[Action[Any], ...] = (PUT, DELETE, DELETE_PREFIX, GET, BARRIER)
