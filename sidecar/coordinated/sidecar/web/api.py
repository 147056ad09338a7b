"""The client API on the HTTP port (docs/sidecar.md), with Elasticsearch's error shape.

Every handler validates its query string (unknown parameters are refused, as Elasticsearch does) and its
body before touching the node; the middleware turns any failure into a JSON error, so no request can take
the node down.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qsl, unquote

import msgspec
from aiohttp import HttpVersion11, web

from coordinated.coordination.client import (
    AddVotingConfigExclusions,
    ClearVotingConfigExclusions,
    ClusterError,
    Committed,
    KvDelete,
    KvDeletePrefix,
    KvGet,
    KvPut,
    PrevKey,
    ReadBarrier,
    ReadValue,
    SessionCreate,
    SessionEnd,
    SessionInfo,
    SessionKeepAlive,
    Txn,
    TxnOpResult,
    TxnResult,
    UpdateSettings,
    error_body,
)
from coordinated.coordination.context import Mode
from coordinated.coordination.counters import LONG_MAX
from coordinated.coordination.ranges import DEFAULT_RANGE_LIMIT, MAX_RANGE_LIMIT
from coordinated.coordination.settings import CLUSTER_NAME, parse_time_ms
from coordinated.coordination.state import session_binding_to_api, state_to_api
from coordinated.coordination.validation import (
    hook_name_problem,
    key_prefix_problem,
    metadata_key_problem,
    session_create_problem,
    session_id_problem,
    settings_problem,
    stored_key_problem,
    txn_problem,
    value_problem,
)
from coordinated.sidecar.events.history import read_events_after
from coordinated.sidecar.features.change_log import ChangesGone
from coordinated.sidecar.features.hooks import MAX_HOOKS, HookSpec
from coordinated.sidecar.features.listings import ListingGone
from coordinated.sidecar.features.watch_streams import CLOSE_GRACE_S, LOST_MASTER, Filter, chunk, event_line
from coordinated.sidecar.features.watch_streams import line as stream_line
from coordinated.sidecar.node import Node
from coordinated.sidecar.observability.problems import BLOCKING, RED, YELLOW, ProblemKind
from coordinated.sidecar.web import state_filter
from coordinated.sidecar.web.access import Tokens, access_middleware
from coordinated.sidecar.web.api_types import SessionBody, SettingsBody
from coordinated.sidecar.web.http_server import BODY_TIMEOUT_S, MAX_CONTENT_LENGTH

log = logging.getLogger("coordinated.api")
_JSON_ENCODER = msgspec.json.Encoder()
NODE_KEY: web.AppKey[Node] = web.AppKey("node", Node)
_WAIT_FOR_NODES = re.compile(r"^(>=|<=|>|<|ge\(|le\(|gt\(|lt\()?(\d+)\)?$")
DEFAULT_TIMEOUT = "30s"
_DEFAULT_TIMEOUT_MS = parse_time_ms(DEFAULT_TIMEOUT)
_NO_PARAMS: Mapping[str, str] = MappingProxyType({})
_COMMON_PARAMS = {"pretty", "human", "error_trace", "filter_path"}


class BadRequest(Exception):
    def __init__(self, reason: str, error_type: str = "illegal_argument_exception", status: int = 400) -> None:
        super().__init__(reason)
        self.reason = reason
        self.error_type = error_type
        self.status = status


def error_response(error_type: str, reason: str, status: int) -> web.Response:
    return web.json_response(error_body(error_type, reason, status), status=status)


def result_error(result: ClusterError) -> web.Response:
    return web.json_response(result.to_api(), status=result.status)


@web.middleware
async def errors_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        if request.body_exists:
            # Read whole (and cached for the handler) within a bound, so a slow sender cannot hold a handler.
            try:
                if request.content.is_eof():
                    await request.read()  # all there already, as a small body usually is: nothing to bound
                else:
                    # asyncio.timeout rather than wait_for, which would make a task per request.
                    async with asyncio.timeout(BODY_TIMEOUT_S):
                        await request.read()
            except TimeoutError:
                raise BadRequest(
                    f"the request body was not received within {BODY_TIMEOUT_S:.0f}s", "request_timeout_exception", 408
                ) from None
        response = await handler(request)
    except BadRequest as error:
        response = error_response(error.error_type, error.reason, error.status)
    except web.HTTPRequestEntityTooLarge:
        limit = request.app[NODE_KEY].config.settings[MAX_CONTENT_LENGTH]
        reason = f"request body too large: the limit is {limit} bytes (setting http.max_content_length)"
        response = error_response("content_too_long_exception", reason, 413)
    except web.HTTPException as error:
        if error.status < 400:
            raise
        reason = f"no handler found for uri [{request.path}] and method [{request.method}]"
        if error.status not in (404, 405):
            reason = error.text or error.reason
        response = error_response(error.reason.lower().replace(" ", "_") + "_exception", reason, error.status)
    except UnicodeDecodeError as error:  # e.g. a string in a JSON body that is not UTF-8
        log.info("refused %s %s from %s: invalid UTF-8: %s", request.method, request.path, request.remote, error)
        response = error_response("parse_exception", f"invalid UTF-8: {error}", 400)
    except Exception as error:  # never let a request take the node down
        log.exception("error handling %s %s", request.method, request.path)
        response = error_response("internal_server_exception", f"{type(error).__name__}: {error}", 500)
    if response.status == 408:
        response.force_close()  # the rest of the body may still arrive: do not read it as a next request
    metrics = request.app[NODE_KEY].metrics
    metrics.count_request(response.status)
    if response.status == 409:  # only a conditional write answers 409
        metrics.version_conflicts.inc()
    return response


# -- parameter and body parsing ---------------------------------------------------------------------------


def check_params(
    request: web.Request, allowed: set[str], repeatable: frozenset[str] = frozenset()
) -> Mapping[str, str]:
    """The query, once every parameter is known and given once (those of `repeatable` may repeat: read them
    with `request.query.getall`)."""
    if not request.query_string:
        return _NO_PARAMS  # most requests: no query to parse (yarl's parse of even an empty one costs)
    raw_query = request.rel_url.raw_query_string
    if "%" in raw_query:  # yarl would decode invalid UTF-8 to U+FFFD: a parameter changed without a word
        try:
            parse_qsl(raw_query, keep_blank_values=True, errors="strict")
        except UnicodeDecodeError as error:
            raise BadRequest(f"the query string is not UTF-8 once percent-decoded: {error}") from None
    unknown = sorted(set(request.query) - allowed - _COMMON_PARAMS)
    if unknown:
        raise BadRequest(
            f"request [{request.path}] contains unrecognized parameter{'s' if len(unknown) > 1 else ''}: {unknown}"
        )
    for name in request.query:
        if name not in repeatable and len(request.query.getall(name)) > 1:
            raise BadRequest(f"parameter [{name}] is given more than once")
    return request.query


def param_bool(query: Mapping[str, str], name: str, default: bool) -> bool:
    value = query.get(name)
    if value is None:
        return default
    if value in ("", "true"):
        return True
    if value == "false":
        return False
    raise BadRequest(f"failed to parse value [{value}] as only [true] or [false] are allowed for parameter [{name}]")


def param_time_ms(query: Mapping[str, str], name: str, default: str) -> int:
    value = query.get(name, default)
    try:
        parsed = parse_time_ms(value)
    except ValueError as error:
        raise BadRequest(f"failed to parse parameter [{name}]: {error}") from None
    if parsed > 3_600_000:
        raise BadRequest(f"parameter [{name}] must be at most 1h, got [{value}]")
    return parsed


def param_int(query: Mapping[str, str], name: str, default: int | None, minimum: int = 0) -> int | None:
    value = query.get(name)
    if value is None:
        return default
    # Plain ASCII digits only: int() would also take " 5", "+5", "1_000" and other scripts' digits.
    if not value.isascii() or not value.isdigit() or int(value) > LONG_MAX:
        raise BadRequest(f"failed to parse parameter [{name}]: expected a non-negative long, got [{value}]")
    parsed = int(value)
    if parsed < minimum:
        raise BadRequest(f"parameter [{name}] must be at least {minimum}, got [{value}]")
    return parsed


def timeout_of(query: Mapping[str, str]) -> int:
    if not query:
        return _DEFAULT_TIMEOUT_MS
    if "timeout" in query and "master_timeout" in query:
        raise BadRequest("give only one of [timeout] and [master_timeout]")
    name = "master_timeout" if "master_timeout" in query else "timeout"
    return param_time_ms(query, name, DEFAULT_TIMEOUT)


async def read_json(request: web.Request, required: bool = True) -> Any:
    body = await request.read()
    if not body.strip():
        if required:
            raise BadRequest("request body is required", "parse_exception")
        return None
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError as error:
        raise BadRequest(f"malformed JSON body: {error}", "parse_exception") from None
    except UnicodeDecodeError as error:
        raise BadRequest(f"malformed JSON body: invalid UTF-8: {error}", "parse_exception") from None
    except RecursionError:
        raise BadRequest("malformed JSON body: nested too deeply", "parse_exception") from None


def decode_body(data: Any, type_: type[Any], what: str) -> Any:
    try:
        return msgspec.convert(data, type_)
    except msgspec.ValidationError as error:
        raise BadRequest(f"invalid {what}: {error}", "x_content_parse_exception") from None


def key_in_path(request: web.Request) -> str:
    """The key named by the rest of the path, percent-decoded once as UTF-8: `%2F` names the same key as `/`,
    and `%252F` a key with `%2F` in it. aiohttp's decoded path cannot tell those two apart, so the raw path
    is decoded here, exactly once."""
    encoded = request.rel_url.raw_path.split("/", 3)[3]  # after "", "_cluster" and "metadata"
    try:
        return unquote(encoded, errors="strict")
    except UnicodeDecodeError as error:
        raise BadRequest(f"the key in the path is not UTF-8 once percent-decoded: {error}") from None


def check_key(request: web.Request) -> str:
    """The key a write names, as every write checks it."""
    key = key_in_path(request)
    problem = metadata_key_problem(key)
    if problem is not None:
        raise BadRequest(problem)
    return key


def check_stored_key(request: web.Request) -> str:
    """The key a read or a delete names: any key this node's state holds, else a name the rules allow."""
    key = key_in_path(request)
    problem = stored_key_problem(key, node_of(request).applied_state)
    if problem is not None:
        raise BadRequest(problem)
    return key


def write_condition(query: Mapping[str, str]) -> int | None:
    """`if_version=N` (0: the key must not exist) or `op_type=create`; None for an unconditional write."""
    if not query:
        return None
    op_type = query.get("op_type", "index")
    if op_type not in ("index", "create"):
        raise BadRequest(f"opType must be 'create' or 'index', found: [{op_type}]")
    if_version: int | None = None
    if "if_version" in query:
        raw = query["if_version"]
        if not raw.isascii() or not raw.isdigit() or int(raw) > LONG_MAX:
            raise BadRequest(f"failed to parse parameter [if_version]: [{raw}] is not a non-negative long")
        if_version = int(raw)
    if op_type == "create":
        if if_version not in (None, 0):
            raise BadRequest("[op_type=create] means [if_version=0]; it cannot be combined with another version")
        return 0
    return if_version


async def no_body(request: web.Request) -> None:
    if (await request.read()).strip():
        raise BadRequest(f"request [{request.method} {request.path}] does not support having a body")


# -- handlers ---------------------------------------------------------------------------------------------


def setup_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/", root)
    r.add_get("/_cluster/state", cluster_state)
    r.add_get("/_cluster/health", cluster_health)
    r.add_get("/_cat/master", cat_master)
    r.add_post("/_cluster/metadata/_txn", metadata_txn)  # `_` names are reserved: never a key
    r.add_get("/_cluster/metadata/_watch", metadata_watch)
    r.add_get("/_cluster/metadata", metadata_range)
    r.add_delete("/_cluster/metadata", metadata_delete_prefix)
    # A key may hold `/`, written literally in the path; any other character reaches the key check.
    r.add_put("/_cluster/metadata/{key:[\\s\\S]+}", metadata_put)
    r.add_delete("/_cluster/metadata/{key:[\\s\\S]+}", metadata_delete)
    r.add_get("/_cluster/metadata/{key:[\\s\\S]+}", metadata_get)
    r.add_get("/_cluster/settings", settings_get)
    r.add_put("/_cluster/settings", settings_put)
    r.add_post("/_cluster/voting_config_exclusions", exclusions_add)
    r.add_delete("/_cluster/voting_config_exclusions", exclusions_clear)
    r.add_post("/_sessions", session_create)
    r.add_get("/_sessions", sessions_list)
    r.add_put("/_sessions/{id}/_keepalive", session_keepalive)
    r.add_delete("/_sessions/{id}", session_delete)
    r.add_get("/_history", history)
    r.add_get("/metrics", metrics)
    r.add_get("/healthz", healthz)
    r.add_get("/readyz", readyz)
    r.add_get("/_hooks", hooks_list)
    r.add_put("/_hooks/{name}", hook_put)
    r.add_delete("/_hooks/{name}", hook_delete)


def node_of(request: web.Request) -> Node:
    return request.app[NODE_KEY]


async def root(request: web.Request) -> web.Response:
    check_params(request, set())
    node = node_of(request)
    assert node.coordinator is not None
    core = node.coordinator.status()
    return web.json_response(
        {
            "name": node.local_node.name,
            "node_id": node.node_id,
            "cluster_name": node.config.settings[CLUSTER_NAME],
            "cluster_uuid": node.applied_state.cluster_uuid,
            "transport_address": node.local_node.transport_address,
            "mode": str(core.mode),
            "term": core.term,
            "tagline": "You Know, for Coordination",
        }
    )


def master_not_discovered() -> web.Response:
    return error_response("master_not_discovered_exception", "no master has been discovered yet", 503)


async def cluster_state(request: web.Request) -> web.Response:
    query = check_params(request, {"local", "wait_for_version", "wait_for_timeout", "master_timeout"})
    local = param_bool(query, "local", False)
    wait_for = param_int(query, "wait_for_version", None)
    wait_ms = param_time_ms(query, "wait_for_timeout", "30s")
    timeout_ms = timeout_of(query)  # checked even with `local`, which does not wait for the master
    node = node_of(request)
    timed_out = False
    if wait_for is not None:
        timed_out = not await node.wait_for_version(wait_for, wait_ms / 1000)
    if not local:
        if node.applied_state.master_node is None:
            return master_not_discovered()
        problem = await read_barrier(node, timeout_ms)
        if problem is not None:
            return problem
    if "filter_path" not in query:
        body = state_to_api(node.applied_state)
        if wait_for is not None:
            body["wait_for_timed_out"] = timed_out
        return web.json_response(body)
    try:
        patterns = state_filter.parse(query["filter_path"])
    except ValueError as error:
        raise BadRequest(str(error)) from None
    body = state_to_api(state_filter.lighten(node.applied_state, patterns))
    if wait_for is not None:
        body["wait_for_timed_out"] = timed_out
    return web.json_response(state_filter.apply(body, patterns))


async def read_barrier(node: Node, timeout_ms: int) -> web.Response | None:
    """Wait until this node has applied the master's state as of now (confirmed with a quorum), so that a
    non-local read includes every write acknowledged before it began, whichever node serves it, as
    Elasticsearch's reads from the master do. None when done, otherwise the error to answer with."""
    assert node.loop is not None
    deadline = node.loop.time() + timeout_ms / 1000
    result = await node.call(ReadBarrier(), timeout_ms)
    return await _applied_in_time(node, result, deadline, "read")


async def _applied_in_time(
    node: Node, result: Committed | ClusterError, deadline: float, local_verb: str
) -> web.Response | None:
    """The barrier's answer names the master's committed version: wait until this node has applied it, until
    `deadline`. None when done, otherwise the error to answer with."""
    assert node.loop is not None
    if isinstance(result, ClusterError):
        return result_error(result)
    if not await node.wait_for_version(result.version, max(0.0, deadline - node.loop.time())):
        reason = (
            f"this node has not applied version [{result.version}] of the master's state in time "
            f"(applied [{node.applied_state.version}]); retry, or {local_verb} with ?local=true"
        )
        return error_response("process_cluster_event_timeout_exception", reason, 503)
    return None


def health_body(node: Node) -> dict[str, Any]:
    assert node.coordinator is not None
    core = node.coordinator.status()
    state = node.applied_state
    nodes = state.nodes if state.master_node is not None else {}
    status = core.health.value
    problem = core.formation_problem
    if problem and node.unresolved_seeds:
        problem += f"; cannot resolve seed hosts {node.unresolved_seeds}"
    foreign = core.foreign_clusters
    if foreign:
        problem = f"{problem}; {foreign}" if problem else foreign
    persistence_problem = node.persist_monitor.failure
    problems = node.problems()
    history = node.history_maintenance.status
    if status == "green" and any(found.kind in YELLOW for found in problems):
        status = "yellow"  # the node works, but its volume is filling up, its history lost something or is not archived
    if any(found.kind in RED for found in problems):
        status = "red"  # this node cannot accept states: whatever it serves may be stale
    if problem:
        # Why no master, as far as the transport can tell: peers that refused this node, or that it refused.
        refused = [found.reason for found in problems if found.kind is ProblemKind.TRANSPORT]
        problem = "; ".join([problem, *refused])
    archive_problem = next((found.reason for found in problems if found.kind is ProblemKind.ARCHIVE), None)
    return {
        "cluster_name": state.cluster_name,
        "cluster_uuid": state.cluster_uuid,
        "status": status,
        "timed_out": False,
        "master_node": state.master_node,
        "number_of_nodes": len(nodes),
        "number_of_master_eligible_nodes": sum(1 for n in nodes.values() if n.master_eligible),
        "formation_problem": problem,
        "persistence_problem": persistence_problem,
        "disk_problem": history.disk_problem or None,
        "history_problem": history.history_problem or None,
        "archive_problem": archive_problem,
        "problems": [found.to_api() for found in problems],
        "mode": str(core.mode),
        "term": core.term,
        "version": state.version,
    }


def nodes_predicate(spec: str) -> Callable[[int], bool]:
    match = _WAIT_FOR_NODES.match(spec.strip())
    if not match:
        raise BadRequest(f"failed to parse parameter [wait_for_nodes]: expected N, >=N, <=N, >N or <N, got [{spec}]")
    op, count = (match.group(1) or "").rstrip("("), int(match.group(2))
    return {
        "": lambda n: n == count,
        ">=": lambda n: n >= count,
        "ge": lambda n: n >= count,
        "<=": lambda n: n <= count,
        "le": lambda n: n <= count,
        ">": lambda n: n > count,
        "gt": lambda n: n > count,
        "<": lambda n: n < count,
        "lt": lambda n: n < count,
    }[op]


async def cluster_health(request: web.Request) -> web.Response:
    query = check_params(request, {"wait_for_nodes", "timeout", "local", "master_timeout"})
    param_bool(query, "local", False)
    param_time_ms(query, "master_timeout", DEFAULT_TIMEOUT)  # accepted for Elasticsearch's clients: no effect
    timeout_ms = param_time_ms(query, "timeout", "30s")
    node = node_of(request)
    if "wait_for_nodes" in query:
        predicate = nodes_predicate(query["wait_for_nodes"])

        def ready() -> bool:
            return node.applied_state.master_node is not None and predicate(len(node.applied_state.nodes))

        if not await node.wait_for(ready, timeout_ms / 1000):
            body = health_body(node)
            body["timed_out"] = True
            return web.json_response(body, status=408)
    return web.json_response(health_body(node))


async def cat_master(request: web.Request) -> web.Response:
    query = check_params(request, {"format", "v", "h", "local"})
    param_bool(query, "local", False)  # the answer is this node's applied state either way
    header = param_bool(query, "v", False)
    fmt = query.get("format", "text")
    if fmt not in ("json", "text"):
        raise BadRequest(f"unsupported format [{fmt}]; use json or text")
    node = node_of(request)
    state = node.applied_state
    master = state.nodes.get(state.master_node) if state.master_node else None
    if master is None:
        return master_not_discovered()
    host = master.transport_address.rpartition(":")[0].strip("[]")
    row = {"id": master.id, "host": host, "ip": host, "node": master.name}
    if fmt == "json":
        return web.json_response([row])
    header_line = "id host ip node\n" if header else ""
    return web.Response(text=f"{header_line}{row['id']} {row['host']} {row['ip']} {row['node']}\n")


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


def write_result(key: str, result: Committed | ClusterError) -> web.Response:
    if isinstance(result, Committed):
        # Every acknowledged write answers this: msgspec rather than json_response's json.dumps.
        answer = {"key": key, "term": result.term, "version": result.version}
        if result.prev is not msgspec.UNSET:
            answer.update(prev_to_api(result.prev))
        body = _JSON_ENCODER.encode(answer)
        return web.Response(body=body, content_type="application/json", charset="utf-8")
    return result_error(result)


async def metadata_put(request: web.Request) -> web.Response:
    query = check_params(request, {"timeout", "master_timeout", "if_version", "op_type", "session", "prev_value"})
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


async def metadata_delete(request: web.Request) -> web.Response:
    query = check_params(request, {"timeout", "master_timeout", "if_version", "prev_value"})
    key = check_stored_key(request)
    condition = write_condition(query)
    prev = param_bool(query, "prev_value", False)
    timeout_ms = timeout_of(query)
    await no_body(request)
    return write_result(key, await node_of(request).call(KvDelete(key, condition, prev), timeout_ms))


def query_prefix(query: Mapping[str, str]) -> str:
    """The `prefix` parameter: empty (or absent) for every key."""
    prefix = query.get("prefix", "")
    problem = key_prefix_problem(prefix)
    if problem is not None:
        raise BadRequest(f"invalid parameter [prefix]: {problem}")
    return prefix


async def metadata_delete_prefix(request: web.Request) -> web.Response:
    """Every key under `prefix` (every key if it is empty), deleted in one committed state."""
    query = check_params(request, {"prefix", "timeout", "master_timeout"})
    if "prefix" not in query:
        raise BadRequest("a delete of [/_cluster/metadata] needs [prefix]: the keys it deletes (empty: every key)")
    prefix = query_prefix(query)
    timeout_ms = timeout_of(query)
    await no_body(request)
    result = await node_of(request).call(KvDeletePrefix(prefix), timeout_ms)
    if isinstance(result, Committed):
        deleted = 0 if result.deleted is msgspec.UNSET else result.deleted
        return web.json_response({"prefix": prefix, "deleted": deleted, "term": result.term, "version": result.version})
    return result_error(result)


_RANGE_ENCODER = msgspec.json.Encoder()
_RANGE_PARAMS = {
    "prefix",
    "keys_only",
    "limit",
    "after",
    "at_version",
    "count_only",
    "local",
    "timeout",
    "master_timeout",
}


async def metadata_range(request: web.Request) -> web.Response:
    """A page of the keys under `prefix`, in key order, from one state version (listings.py): linearizable
    unless `local`; a continuation (`at_version` and `after`) reads the state of its listing's first page."""
    query = check_params(request, _RANGE_PARAMS)
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
    assert node.loop is not None
    if at_version is not None:
        try:
            page = node.listings.next_page(
                node.applied_state, at_version, prefix, after, limit, keys_only, node.loop.time()
            )
        except ListingGone as gone:
            return error_response("resource_gone_exception", str(gone), 410)
        return web.Response(body=_RANGE_ENCODER.encode(page), content_type="application/json", charset="utf-8")
    problem = await consistent_read(node, local, timeout_of(query))
    if problem is not None:
        return problem
    state = node.applied_state
    if count_only:
        return web.json_response({"version": state.version, "count": node.listings.count(state, prefix)})
    page = node.listings.first_page(state, prefix, after, limit, keys_only, node.loop.time())
    return web.Response(body=_RANGE_ENCODER.encode(page), content_type="application/json", charset="utf-8")


async def consistent_read(node: Node, local: bool, timeout_ms: int) -> web.Response | None:
    """Before a read of this node's applied state: with `local`, only the no-master block; otherwise a read
    barrier (shared with the reads that arrive with it), so that the state read holds every write acknowledged
    before the request. None when the read may go ahead, otherwise the error to answer with."""
    assert node.coordinator is not None
    if local:
        block = node.coordinator.status().no_master_block
        return result_error(block.error()) if block.refuses_local_reads else None
    if node.applied_state.master_node is None:
        return master_not_discovered()
    return await shared_read_barrier(node, timeout_ms)


def txn_op_to_api(result: TxnOpResult) -> dict[str, Any]:
    if result.op == "put":
        put = {"op": "put", "key": result.key, "version": result.version, "create_version": result.create_version}
        return {**put, **prev_to_api(result.prev)}
    if result.op == "delete":
        return {"op": "delete", "key": result.key, "deleted": result.found, **prev_to_api(result.prev)}
    if result.op == "delete_prefix":
        return {"op": "delete_prefix", "prefix": result.key, "deleted": result.deleted}
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


async def metadata_txn(request: web.Request) -> web.Response:
    query = check_params(request, {"timeout", "master_timeout"})
    timeout_ms = timeout_of(query)
    body = await read_json(request)
    if not isinstance(body, dict) or not set(body) <= {"compare", "success", "failure"}:
        raise BadRequest('a transaction is {"compare": [...], "success": [...], "failure": [...]}')
    txn = decode_body(body, Txn, "transaction")
    problem = txn_problem(txn)
    if problem is not None:
        raise BadRequest(problem)
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


def with_session(body: dict[str, Any], session: str | None) -> dict[str, Any]:
    """An ephemeral key's answer names its session; a persistent key's has no `session` field."""
    if session is not None:
        body["session"] = session
    return body


def key_not_found(key: str) -> web.Response:
    return error_response("resource_not_found_exception", f"metadata key [{key}] not found", 404)


async def metadata_get(request: web.Request) -> web.Response:
    query = check_params(request, {"local", "timeout", "master_timeout"})
    key = check_stored_key(request)
    local = param_bool(query, "local", False)
    timeout_ms = timeout_of(query)
    node = node_of(request)
    if local:
        state = node.applied_state
        assert node.coordinator is not None
        block = node.coordinator.status().no_master_block
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
        return web.json_response(with_session(body, state.kv_sessions.get(key)))
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
        return web.json_response(with_session(body, result.session))
    return result_error(result)


# A watch waits at most this long per request (the client asks again); a longer wait only holds connections.
WATCH_MAX_TIMEOUT_MS = 300_000
# Events per answer: the rest follow on the next request (whole steps only, so a little more is possible).
WATCH_MAX_EVENTS = 1000


async def shared_read_barrier(node: Node, timeout_ms: int) -> web.Response | None:
    """`read_barrier`, shared by every watch that arrives while one is in flight (see SharedBarrier)."""
    assert node.loop is not None
    deadline = node.loop.time() + timeout_ms / 1000
    try:
        result = await asyncio.wait_for(node.shared_read_barrier(), timeout_ms / 1000)
    except TimeoutError:
        return error_response("process_cluster_event_timeout_exception", "could not reach the master in time", 503)
    return await _applied_in_time(node, result, deadline, "watch")


_WATCH_PARAMS = {"prefix", "after_version", "timeout", "master_timeout", "local", "stream", "prev_value", "filter"}
_STREAM_ONLY = ("prev_value", "filter")


async def metadata_watch(request: web.Request) -> web.StreamResponse:
    """Every change under `prefix` after `after_version` (omitted: from now): with `stream=true` on one held
    response as they come (watch_streams.py), otherwise in one answer, waiting up to `timeout` for one."""
    query = check_params(request, _WATCH_PARAMS, repeatable=frozenset({"prefix"}))
    given = request.query.getall("prefix", []) if query else []
    prefixes = tuple(query_prefix({"prefix": prefix}) for prefix in given) or ("",)
    after = param_int(query, "after_version", None)
    master_timeout_ms = param_time_ms(query, "master_timeout", DEFAULT_TIMEOUT)
    local = param_bool(query, "local", False)
    await no_body(request)
    if param_bool(query, "stream", False):
        if "timeout" in query:
            raise BadRequest("a stream has no [timeout]: it lasts until the client closes it")
        filter_: Filter = None
        if "filter" in query:
            if query["filter"] not in ("put", "delete"):
                raise BadRequest(f"parameter [filter] must be [put] or [delete], got [{query['filter']}]")
            filter_ = "put" if query["filter"] == "put" else "delete"
        prev_value = param_bool(query, "prev_value", False)
        return await watch_stream(request, prefixes, after, filter_, prev_value, local, master_timeout_ms)
    if len(prefixes) > 1:
        raise BadRequest("several [prefix] parameters need [stream=true]")
    for name in _STREAM_ONLY:
        if name in query:
            raise BadRequest(f"parameter [{name}] needs [stream=true]")
    prefix = prefixes[0]
    timeout_ms = param_time_ms(query, "timeout", DEFAULT_TIMEOUT)
    if timeout_ms > WATCH_MAX_TIMEOUT_MS:
        raise BadRequest(f"parameter [timeout] must be at most 5m, got [{query['timeout']}]")
    node = node_of(request)
    assert node.loop is not None and node.coordinator is not None
    deadline = node.loop.time() + timeout_ms / 1000
    problem = await consistent_read(node, local, master_timeout_ms)
    if problem is not None:
        return problem
    hub = node.key_watches
    if after is None:
        after = hub.log.version
    while True:
        try:
            events, version = hub.log.events_after(prefix, after, WATCH_MAX_EVENTS)
        except ChangesGone as gone:
            return error_response("resource_gone_exception", str(gone), 410)
        remaining = deadline - node.loop.time()
        if events or remaining <= 0 or hub.closed:
            return web.json_response({"version": version, "events": [event.to_api() for event in events]})
        # Nothing under the prefix up to `version`: park from there. Unless a state then changes a key under
        # the prefix, nothing has changed for this watcher, however far the log moves on meanwhile.
        after = version
        if not await hub.wait(prefix, remaining):
            return web.json_response({"version": max(after, hub.log.version), "events": []})


async def watch_stream(
    request: web.Request,
    prefixes: tuple[str, ...],
    after: int | None,
    filter_: Filter,
    prev_value: bool,
    local: bool,
    master_timeout_ms: int,
) -> web.StreamResponse:
    """One read barrier, the changes the log holds after `after` (written as the client reads them), then the
    stream joins its group in the node's StreamHub, which feeds it as states are applied, until it ends."""
    if request.version < HttpVersion11:
        raise BadRequest("a watch stream needs HTTP/1.1: its body is chunked")
    node = node_of(request)
    problem = await consistent_read(node, local, master_timeout_ms)
    if problem is not None:
        return problem
    response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    changes = node.key_watches.log
    after = changes.version if after is None else after
    while True:  # the backlog, flow-controlled; then, without an await in between, the live stream
        try:
            events, version = changes.events_after(prefixes, after, WATCH_MAX_EVENTS)
        except ChangesGone as gone:
            await response.write(stream_line(type="gone", version=changes.version, oldest=gone.base))
            await response.write_eof()
            return response
        if not events:
            break
        lines = [event_line(event, prev_value) for event in events if filter_ is None or event.type == filter_]
        if lines:
            await response.write(b"".join(lines))
        after = version
    transport = request.transport
    if transport is None or transport.is_closing():
        return response
    hub = node.watch_streams
    stream = hub.add(transport, prefixes, filter_, prev_value, after, needs_master=not local)
    transport.write(chunk(stream_line(type="progress", version=after)))  # live from here
    if not local and node.applied_state.master_node is None:
        hub.end(stream, LOST_MASTER)  # lost during the backlog
    try:
        await stream.ended
    finally:
        hub.remove(stream)
    if not transport.is_closing():
        try:
            async with asyncio.timeout(CLOSE_GRACE_S):
                await response.write_eof()
        except (TimeoutError, ConnectionError):
            transport.abort()  # a client that does not read even its stream's end
    return response


# -- sessions ---------------------------------------------------------------------------------------------


def check_session_id(session: str, what: str) -> str:
    problem = session_id_problem(session)
    if problem is not None:
        raise BadRequest(f"[{what}]: {problem}" if what == "session" else problem)
    return session


def session_body(session_id: str, ttl_ms: int, node_id: str | None, node: Node) -> dict[str, Any]:
    return {"id": session_id, **session_binding_to_api(ttl_ms, node_id, node.applied_state.nodes)}


def session_result(result: SessionInfo | Committed | ClusterError, node: Node, status: int = 200) -> web.Response:
    if isinstance(result, SessionInfo):
        body = session_body(result.id, result.ttl_ms, result.node, node)
        if result.ttl_ms > 0:
            body["remaining_ms"] = result.remaining_ms  # by the master's clock, when it answered
        return web.json_response(body, status=status)
    if isinstance(result, Committed):
        return web.json_response({"acknowledged": True})
    return result_error(result)


async def session_create(request: web.Request) -> web.Response:
    query = check_params(request, {"timeout", "master_timeout"})
    timeout_ms = timeout_of(query)
    body = decode_body(await read_json(request), SessionBody, "session")
    ttl_ms = 0
    if body.ttl is not None:
        try:
            ttl_ms = parse_time_ms(body.ttl)
        except ValueError as error:
            raise BadRequest(f"failed to parse [ttl]: {error}") from None
    create = SessionCreate(ttl_ms=ttl_ms, node_name=body.node)
    problem = session_create_problem(create)
    if problem is not None:
        raise BadRequest(problem)
    node = node_of(request)
    return session_result(await node.call(create, timeout_ms), node, status=201)


async def session_keepalive(request: web.Request) -> web.Response:
    query = check_params(request, {"timeout", "master_timeout"})
    session = check_session_id(request.match_info["id"], "id")
    timeout_ms = timeout_of(query)
    await no_body(request)
    node = node_of(request)
    return session_result(await node.call(SessionKeepAlive(session), timeout_ms), node)


async def session_delete(request: web.Request) -> web.Response:
    query = check_params(request, {"timeout", "master_timeout"})
    session = check_session_id(request.match_info["id"], "id")
    timeout_ms = timeout_of(query)
    await no_body(request)
    node = node_of(request)
    return session_result(await node.call(SessionEnd(session), timeout_ms), node)


async def sessions_list(request: web.Request) -> web.Response:
    """The sessions of the master's state (after a read barrier), or of this node's with `?local=true`."""
    query = check_params(request, {"local", "timeout", "master_timeout"})
    local = param_bool(query, "local", False)
    timeout_ms = timeout_of(query)  # checked even with `local`, which does not wait for the master
    node = node_of(request)
    if not local:
        if node.applied_state.master_node is None:
            return master_not_discovered()
        problem = await read_barrier(node, timeout_ms)
        if problem is not None:
            return problem
    state = node.applied_state
    keys: dict[str, list[str]] = {}
    for key, owner in sorted(state.kv_sessions.items()):
        keys.setdefault(owner, []).append(key)
    sessions = [
        {**session_body(session_id, session.ttl_ms, session.node, node), "keys": keys.get(session_id, [])}
        for session_id, session in sorted(state.sessions.items())
    ]
    return web.json_response({"version": state.version, "sessions": sessions})


async def settings_get(request: web.Request) -> web.Response:
    query = check_params(request, {"local", "include_defaults", "flat_settings"})
    for name in ("local", "include_defaults", "flat_settings"):  # accepted for Elasticsearch's clients: no effect
        param_bool(query, name, False)
    node = node_of(request)
    return web.json_response({"persistent": dict(node.applied_state.persistent_settings), "transient": {}})


def flatten_settings(prefix: str, values: Mapping[str, Any], out: dict[str, str | None]) -> None:
    for name, value in values.items():
        full = f"{prefix}{name}"
        if isinstance(value, dict):
            flatten_settings(full + ".", value, out)
        elif value is None:
            out[full] = None
        elif isinstance(value, bool):
            out[full] = "true" if value else "false"
        elif isinstance(value, str | int | float):
            out[full] = str(value)
        else:
            raise BadRequest(f"setting [{full}] must be a string, number, boolean or null, got {type(value).__name__}")


async def settings_put(request: web.Request) -> web.Response:
    query = check_params(request, {"timeout", "master_timeout", "flat_settings"})
    param_bool(query, "flat_settings", False)  # accepted for Elasticsearch's clients: no effect
    timeout_ms = timeout_of(query)
    body = decode_body(await read_json(request), SettingsBody, "settings body")
    updates: dict[str, str | None] = {}
    flatten_settings("", body.persistent, updates)
    problem = settings_problem(updates, node_of(request).config.settings.registry)
    if problem is not None:
        raise BadRequest(problem)
    result = await node_of(request).call(UpdateSettings(persistent=updates), timeout_ms)
    if isinstance(result, Committed):
        return web.json_response({"acknowledged": True, "persistent": updates, "transient": {}})
    return result_error(result)


def _names(query: Mapping[str, str], name: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in query.get(name, "").split(",") if part.strip())


async def exclusions_add(request: web.Request) -> web.Response:
    query = check_params(request, {"node_names", "node_ids", "timeout", "master_timeout"})
    exclusions = AddVotingConfigExclusions(node_names=_names(query, "node_names"), node_ids=_names(query, "node_ids"))
    timeout_ms = timeout_of(query)
    await no_body(request)
    node = node_of(request)
    # The master checks the request, and cluster.max_voting_config_exclusions against the exclusions it holds.
    result = await node.call(exclusions, timeout_ms)
    return exclusions_result(node, result)


def exclusions_result(node: Node, result: Committed | ClusterError) -> web.Response:
    if isinstance(result, Committed):
        exclusions = node.applied_state.coordination.voting_config_exclusions
        return web.json_response(
            {
                "acknowledged": True,
                "voting_config_exclusions": [{"node_id": e.node_id, "node_name": e.node_name} for e in exclusions],
            }
        )
    return result_error(result)


async def exclusions_clear(request: web.Request) -> web.Response:
    query = check_params(request, {"wait_for_removal", "timeout", "master_timeout"})
    wait = param_bool(query, "wait_for_removal", True)
    timeout_ms = timeout_of(query)
    await no_body(request)
    node = node_of(request)
    result = await node.call(ClearVotingConfigExclusions(wait_for_removal=wait), timeout_ms)
    return exclusions_result(node, result)


async def history(request: web.Request) -> web.StreamResponse:
    query = check_params(request, {"after_seq", "size"})
    after = param_int(query, "after_seq", 0) or 0
    size = param_int(query, "size", None, minimum=1)
    node = node_of(request)
    response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    await response.prepare(request)
    batch: list[bytes] = []
    for line in read_events_after(node.history_dir, after, size):
        batch.append(line)
        if len(batch) >= 512:
            await response.write(b"".join(batch))
            batch = []
    if batch:
        await response.write(b"".join(batch))
    await response.write_eof()
    return response


async def metrics(request: web.Request) -> web.Response:
    check_params(request, set())
    body = node_of(request).metrics.render()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    node = node_of(request)
    assert node.coordinator is not None
    blocking = [found.reason for found in node.problems() if found.kind in BLOCKING]
    if blocking:
        return web.json_response({"ready": False, "reason": "; ".join(blocking)}, status=503)
    core = node.coordinator.status()
    if node.applied_state.master_node is not None and core.mode is not Mode.CANDIDATE:
        return web.json_response({"ready": True, "master_node": node.applied_state.master_node})
    return web.json_response({"ready": False, "reason": core.formation_problem or "no master"}, status=503)


async def hooks_list(request: web.Request) -> web.Response:
    check_params(request, set())
    return web.json_response(node_of(request).hooks.describe())


def hook_name(request: web.Request) -> str:
    name = request.match_info["name"]
    problem = hook_name_problem(name)
    if problem is not None:
        raise BadRequest(problem)
    return name


async def hook_put(request: web.Request) -> web.Response:
    check_params(request, set())
    name = hook_name(request)
    spec = decode_body(await read_json(request), HookSpec, "hook")
    problem = spec.problem()
    if problem:
        raise BadRequest(problem)
    hooks = node_of(request).hooks
    if name not in hooks.specs and len(hooks.specs) >= MAX_HOOKS:
        raise BadRequest(f"at most {MAX_HOOKS} hooks can be registered")
    created = hooks.put(name, spec)
    return web.json_response({"acknowledged": True, "created": created}, status=201 if created else 200)


async def hook_delete(request: web.Request) -> web.Response:
    check_params(request, set())
    name = hook_name(request)
    await no_body(request)
    if not node_of(request).hooks.delete(name):
        return error_response("resource_not_found_exception", f"hook [{name}] not found", 404)
    return web.json_response({"acknowledged": True})


def client_app(
    node: Node, tokens: Tokens | None = None, extra_routes: Sequence[Callable[[web.UrlDispatcher], None]] = ()
) -> web.Application:
    """With `tokens`, every request is checked (before its body is read) by the access middleware.
    `extra_routes` add the APIs that live in their own modules (snapshots)."""
    middlewares: list[Callable[..., Awaitable[web.StreamResponse]]] = [errors_middleware]
    if tokens is not None:
        middlewares.insert(0, access_middleware(tokens, node.metrics.count_request))
    app = web.Application(client_max_size=node.config.settings[MAX_CONTENT_LENGTH], middlewares=middlewares)
    app[NODE_KEY] = node
    setup_routes(app)
    for add_routes in extra_routes:
        add_routes(app.router)
    return app
