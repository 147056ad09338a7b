"""The keys: reads, writes, range reads, prefix deletes and transactions under `/_cluster/metadata`."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from aiohttp import web

from coordinated.coordination.client import ClusterError, Committed, PrevKey, ReadValue, TxnOpResult, TxnResult
from coordinated.coordination.ranges import DEFAULT_RANGE_LIMIT, MAX_RANGE_LIMIT, RangePage
from coordinated.coordination.requests.keys import MAX_PREFIX_DELETE, KvDelete, KvDeletePrefix, KvGet, KvPut
from coordinated.coordination.requests.transactions import Txn, txn_accesses, txn_problem
from coordinated.coordination.validation import value_problem
from coordinated.sidecar.features.listings import ListingGone
from coordinated.sidecar.web import api_types as t
from coordinated.sidecar.web.access import authorize, permissions_of, shows_writers
from coordinated.sidecar.web.app_keys import node_of
from coordinated.sidecar.web.errors import BadRequest, error_response, result_error
from coordinated.sidecar.web.inputs import (
    check_key,
    check_stored_key,
    decode_body,
    no_body,
    param_bool,
    param_int,
    query_prefix,
    read_json,
    timeout_of,
    write_condition,
)
from coordinated.sidecar.web.privileges import Privilege
from coordinated.sidecar.web.reads import consistent_read
from coordinated.sidecar.web.routes import (
    BOOLEAN,
    COUNT,
    LOCAL,
    TIMEOUTS,
    WRITE_ERRORS,
    KeysFrom,
    Param,
    Query,
    Route,
    Routes,
)
from coordinated.sidecar.web.sessions import check_session_id

routes = Routes()
_JSON_ENCODER = msgspec.json.Encoder()
_RANGE_ENCODER = msgspec.json.Encoder()
IF_VERSION = Param("if_version", COUNT, "write only if the key's version is this (0: only if it does not exist)")
PREFIX = Param("prefix", {"type": "string"}, "only the keys that start with this; default every key")
PREV_VALUE = Param(
    "prev_value", BOOLEAN, "the answer carries the key as it was before (`prev`; null: it did not exist)"
)


def prev_to_api(prev: PrevKey | msgspec.UnsetType | None) -> dict[str, Any]:
    """A write's `prev` field when it asked for `prev_value`: the key as it was, or null if it did not exist."""
    if prev is msgspec.UNSET:
        return {}
    if prev is None:
        return {"prev": None}
    return {
        "prev": with_session(
            {"value": prev.value, "version": prev.version, "create_version": prev.create_version}, prev.session
        )
    }


def with_session(body: dict[str, Any], session: str | None, writer: str | None = None) -> dict[str, Any]:
    """An ephemeral key's answer names its session; a persistent key's has no `session` field. `writer`: the
    principal that last wrote the key, for an admin's answer."""
    if session is not None:
        body["session"] = session
    if writer is not None:
        body["writer"] = writer
    return body


def write_result(key: str, result: Committed | ClusterError) -> web.Response:
    if isinstance(result, Committed):
        # Every acknowledged write answers this: msgspec rather than json_response's json.dumps.
        answer = {"key": key, "term": result.term, "version": result.version}
        if result.prev is not msgspec.UNSET:
            answer.update(prev_to_api(result.prev))
        body = _JSON_ENCODER.encode(answer)
        return web.Response(body=body, content_type="application/json", charset="utf-8")
    return result_error(result)


def key_not_found(key: str) -> web.Response:
    return error_response("resource_not_found_exception", f"metadata key [{key}] not found", 404)


def txn_op_to_api(result: TxnOpResult) -> dict[str, Any]:
    if result.op == "put":
        put = {"op": "put", "key": result.key, "version": result.version, "create_version": result.create_version}
        return {**put, **prev_to_api(result.prev)}
    if result.op == "delete":
        return {"op": "delete", "key": result.key, "deleted": result.found, **prev_to_api(result.prev)}
    if result.op == "delete_prefix":
        return {"op": "delete_prefix", "prefix": result.key, "deleted": result.deleted, "more": result.more}
    if not result.found:
        return {"op": "get", "key": result.key, "found": False}
    return {
        "op": "get",
        "key": result.key,
        "found": True,
        "value": result.value,
        "version": result.version,
        "create_version": result.create_version,
    }


# `_` names are reserved: never a key, so `_txn` (and the watch's `_watch`) cannot clash with one.
@routes.add(
    Route(
        "POST",
        "/_cluster/metadata/_txn",
        "A transaction: compares, then the success or the failure ops, in one committed state.",
        Privilege.WRITE,
        t.TxnAnswer,
        keys=KeysFrom.BODY,
        params=(*TIMEOUTS, Param("all", BOOLEAN, "`true`: a `delete_prefix` op may have an empty prefix")),
        body=t.TxnBody,
        errors=WRITE_ERRORS,
    )
)
async def metadata_txn(request: web.Request, query: Query) -> web.StreamResponse:
    timeout_ms = timeout_of(query)
    every_key = param_bool(query, "all", False)
    body = await read_json(request)
    if not isinstance(body, dict) or not set(body) <= {"compare", "success", "failure"}:
        raise BadRequest('a transaction is {"compare": [...], "success": [...], "failure": [...]}')
    txn = decode_body(body, Txn, "transaction")
    problem = txn_problem(txn)
    if problem is not None:
        raise BadRequest(problem)
    authorize(request, permissions_of(request), txn_accesses(txn))  # each compare and op, in both branches
    if not every_key and any(op.op == "delete_prefix" and not op.prefix for op in (*txn.success, *txn.failure)):
        raise BadRequest(f"a [delete_prefix] op with {EVERY_KEY.replace('[all=true]', '[all=true] to the URL')}")
    txn = msgspec.structs.replace(txn, delete_limit=MAX_PREFIX_DELETE)
    result = await node_of(request).call(txn, timeout_ms)
    if isinstance(result, TxnResult):
        return web.json_response(
            {
                "succeeded": result.succeeded,
                "version": result.version,
                "results": [txn_op_to_api(op) for op in result.results],
            }
        )
    return result_error(result)


@routes.add(
    Route(
        "GET",
        "/_cluster/metadata",
        "A page of the keys under `prefix`, in key order, from one state version; or their count.",
        Privilege.READ,
        (RangePage, t.KeyCount),  # one of
        keys=KeysFrom.PREFIX,
        params=(
            PREFIX,
            Param("keys_only", BOOLEAN, "without the values"),
            Param("limit", {"type": "integer", "minimum": 1, "maximum": MAX_RANGE_LIMIT}, "keys per page"),
            Param("after", {"type": "string"}, "the next page: the keys after this one (the last page's `next`)"),
            Param("at_version", COUNT, "the next page: from the state of the first page (its `version`)"),
            Param("count_only", BOOLEAN, "only the count of the keys under `prefix`"),
            LOCAL,
            *TIMEOUTS,
        ),
        errors=(400, 410, 503),
        description="Linearizable unless `local`; a continuation reads the state of its listing's first page, "
        "or answers 410 once that state is no longer kept.",
    )
)
async def metadata_range(request: web.Request, query: Query) -> web.StreamResponse:
    """A page of the keys under `prefix`, in key order, from one state version (listings.py): linearizable
    unless `local`; a continuation (`at_version` and `after`) reads the state of its listing's first page."""
    prefix = query_prefix(query)
    keys_only = param_bool(query, "keys_only", False)
    count_only = param_bool(query, "count_only", False)
    limit = param_int(query, "limit", DEFAULT_RANGE_LIMIT, minimum=1) or DEFAULT_RANGE_LIMIT
    if limit > MAX_RANGE_LIMIT:
        raise BadRequest(f"parameter [limit] must be at most {MAX_RANGE_LIMIT}, got [{limit}]")
    after = query.get("after")
    at_version = param_int(query, "at_version", None)
    local = param_bool(query, "local", False)
    if count_only and (keys_only or after is not None or at_version is not None or "limit" in query):
        raise BadRequest(
            "[count_only] counts every key under [prefix]: it takes no [keys_only], [limit], [after] or [at_version]"
        )
    await no_body(request)
    node = node_of(request)
    writers = shows_writers(request)
    if at_version is not None:
        try:
            page = node.keys.listings.next_page(
                node.keys.applied_state,
                at_version,
                prefix,
                after,
                limit,
                keys_only,
                asyncio.get_running_loop().time(),
                writers,
            )
        except ListingGone as gone:
            return error_response("resource_gone_exception", str(gone), 410)
        return web.Response(body=_RANGE_ENCODER.encode(page), content_type="application/json", charset="utf-8")
    problem = await consistent_read(node, local, timeout_of(query))
    if problem is not None:
        return problem
    state = node.keys.applied_state
    if count_only:
        return web.json_response({"version": state.version, "count": node.keys.listings.count(state, prefix)})
    page = node.keys.listings.first_page(
        state, prefix, after, limit, keys_only, asyncio.get_running_loop().time(), writers
    )
    return web.Response(body=_RANGE_ENCODER.encode(page), content_type="application/json", charset="utf-8")


EVERY_KEY = (
    "an empty [prefix] deletes every key: add [all=true] to mean it (an unset shell variable makes an empty prefix)"
)


@routes.add(
    Route(
        "DELETE",
        "/_cluster/metadata",
        "Delete the keys under `prefix`, in key order, at most 1,000 in one committed state; `more`: call again.",
        Privilege.WRITE,
        t.PrefixDeleted,
        keys=KeysFrom.PREFIX,
        params=(
            Param("prefix", {"type": "string"}, "the keys to delete: those starting with this (empty: needs `all`)"),
            Param("all", BOOLEAN, "`true` with no or an empty `prefix`: delete every key"),
            *TIMEOUTS,
        ),
        errors=(400, 503),
    )
)
async def metadata_delete_prefix(request: web.Request, query: Query) -> web.StreamResponse:
    """The keys under `prefix` in key order, at most MAX_PREFIX_DELETE of them in one committed state; `more`
    says that keys are left (call again). An empty prefix (every key) only with `all=true`."""
    every_key = param_bool(query, "all", False)
    if "prefix" not in query and not every_key:
        raise BadRequest("a delete of [/_cluster/metadata] needs [prefix]: the keys it deletes (or [all=true])")
    prefix = query_prefix(query)
    if every_key and prefix:
        raise BadRequest(f"[all=true] deletes every key: it takes no [prefix], got [{prefix}]")
    if not prefix and not every_key:
        raise BadRequest(EVERY_KEY)
    timeout_ms = timeout_of(query)
    await no_body(request)
    result = await node_of(request).call(KvDeletePrefix(prefix, MAX_PREFIX_DELETE), timeout_ms)
    if isinstance(result, Committed):
        deleted = 0 if result.deleted is msgspec.UNSET else result.deleted
        return web.json_response(
            {"prefix": prefix, "deleted": deleted, "more": result.more, "term": result.term, "version": result.version}
        )
    return result_error(result)


@routes.add(
    Route(
        "PUT",
        "/_cluster/metadata/{key}",
        "Write a key (any JSON value), acknowledged once a quorum has committed it.",
        Privilege.WRITE,
        t.WriteAnswer,
        keys=KeysFrom.PATH,
        params=(
            *TIMEOUTS,
            IF_VERSION,
            Param("op_type", {"type": "string", "enum": ["index", "create"]}, "`create`: only if it does not exist"),
            Param("session", {"type": "string"}, "bind the key to this session: it ends with the session"),
            PREV_VALUE,
        ),
        body=Any,
        errors=(*WRITE_ERRORS, 404, 409),
    )
)
async def metadata_put(request: web.Request, query: Query) -> web.StreamResponse:
    key = check_key(request)
    condition = write_condition(query)
    session = query.get("session")
    if session is not None:
        check_session_id(session, "session")
    prev = param_bool(query, "prev_value", False)
    timeout_ms = timeout_of(query)
    value = await read_json(request)
    problem = value_problem(key, value)  # before it is forwarded: every node must be able to decode it
    if problem is not None:
        raise BadRequest(problem)
    return write_result(key, await node_of(request).call(KvPut(key, value, condition, session, prev), timeout_ms))


@routes.add(
    Route(
        "DELETE",
        "/_cluster/metadata/{key}",
        "Delete a key (acknowledged even if it did not exist).",
        Privilege.WRITE,
        t.WriteAnswer,
        keys=KeysFrom.PATH,
        params=(*TIMEOUTS, IF_VERSION, PREV_VALUE),
        errors=(400, 409, 503),
    )
)
async def metadata_delete(request: web.Request, query: Query) -> web.StreamResponse:
    key = check_stored_key(request)
    condition = write_condition(query)
    prev = param_bool(query, "prev_value", False)
    timeout_ms = timeout_of(query)
    await no_body(request)
    return write_result(key, await node_of(request).call(KvDelete(key, condition, prev), timeout_ms))


@routes.add(
    Route(
        "GET",
        "/_cluster/metadata/{key}",
        "Read a key: linearizable, or this node's applied value with `local`.",
        Privilege.READ,
        t.KeyAnswer,
        keys=KeysFrom.PATH,
        params=(LOCAL, *TIMEOUTS),
        errors=(400, 404, 503),
    )
)
async def metadata_get(request: web.Request, query: Query) -> web.StreamResponse:
    key = check_stored_key(request)
    local = param_bool(query, "local", False)
    timeout_ms = timeout_of(query)
    node = node_of(request)
    if local:
        state = node.keys.applied_state
        core = node.status().core
        assert core is not None
        block = core.no_master_block
        if block.refuses_local_reads:
            return result_error(block.error())
        versions = state.key_version(key)
        if versions is None:
            return key_not_found(key)
        body = {
            "key": key,
            "value": state.kv[key],
            "version": versions.version,
            "create_version": versions.create_version,
        }
        writer = state.kv_writers.get(key) if shows_writers(request) else None
        return web.json_response(with_session(body, state.kv_sessions.get(key), writer))
    result = await node.call(KvGet(key), timeout_ms)
    if isinstance(result, ReadValue):
        if not result.found:
            return key_not_found(key)
        body = {
            "key": key,
            "value": result.value,
            "version": result.key_version,
            "create_version": result.create_version,
        }
        writer = result.writer if shows_writers(request) else None
        return web.json_response(with_session(body, result.session, writer))
    return result_error(result)
