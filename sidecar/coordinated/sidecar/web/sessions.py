"""Sessions: created with a TTL or bound to a node, kept alive, ended and listed; keys written with
`session=ID` end with their session."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from coordinated.coordination.client import ClusterError, Committed, SessionInfo
from coordinated.coordination.requests.sessions import (
    SessionCreate,
    SessionEnd,
    SessionKeepAlive,
    session_create_problem,
)
from coordinated.coordination.settings import parse_time_ms
from coordinated.coordination.state import session_binding_to_api
from coordinated.coordination.validation import session_id_problem
from coordinated.sidecar.node import Node
from coordinated.sidecar.web import api_types as t
from coordinated.sidecar.web.app_keys import node_of
from coordinated.sidecar.web.errors import BadRequest, master_not_discovered, result_error
from coordinated.sidecar.web.inputs import decode_body, no_body, param_bool, read_json, timeout_of
from coordinated.sidecar.web.privileges import Privilege
from coordinated.sidecar.web.reads import read_barrier
from coordinated.sidecar.web.routes import LOCAL, TIMEOUTS, WRITE_ERRORS, Query, Route, Routes

routes = Routes()


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


@routes.add(
    Route(
        "POST",
        "/_sessions",
        "Create a session: keys written with `session=ID` end with it.",
        Privilege.SESSION,
        t.SessionAnswer,
        status=201,
        params=TIMEOUTS,
        body=t.SessionBody,
        errors=WRITE_ERRORS,
    )
)
async def session_create(request: web.Request, query: Query) -> web.StreamResponse:
    timeout_ms = timeout_of(query)
    body = decode_body(await read_json(request), t.SessionBody, "session")
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


# Sessions are a writer's, their listing included: their ids are what a writer keeps alive and binds keys to.
@routes.add(
    Route(
        "GET",
        "/_sessions",
        "The sessions, with their ephemeral keys.",
        Privilege.SESSION,
        t.SessionsAnswer,
        params=(LOCAL, *TIMEOUTS),
        errors=(400, 503),
    )
)
async def sessions_list(request: web.Request, query: Query) -> web.StreamResponse:
    """The sessions of the master's state (after a read barrier), or of this node's with `?local=true`."""
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


@routes.add(
    Route(
        "PUT",
        "/_sessions/{id}/_keepalive",
        "Keep a TTL session alive for another TTL.",
        Privilege.SESSION,
        t.SessionAnswer,
        params=TIMEOUTS,
        errors=(400, 404, 503),
    )
)
async def session_keepalive(request: web.Request, query: Query) -> web.StreamResponse:
    session = check_session_id(request.match_info["id"], "id")
    timeout_ms = timeout_of(query)
    await no_body(request)
    node = node_of(request)
    return session_result(await node.call(SessionKeepAlive(session), timeout_ms), node)


@routes.add(
    Route(
        "DELETE",
        "/_sessions/{id}",
        "End a session and delete its keys.",
        Privilege.SESSION,
        t.Acknowledged,
        params=TIMEOUTS,
        errors=(400, 404, 503),
    )
)
async def session_delete(request: web.Request, query: Query) -> web.StreamResponse:
    session = check_session_id(request.match_info["id"], "id")
    timeout_ms = timeout_of(query)
    await no_body(request)
    node = node_of(request)
    return session_result(await node.call(SessionEnd(session), timeout_ms), node)
