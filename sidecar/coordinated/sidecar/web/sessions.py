"""Sessions: created with a TTL or bound to a node, kept alive, ended and listed; keys written with
`session=ID` end with their session."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from coordinated.coordination.authorization import SESSION, KeyAccess, SessionView, session_missing
from coordinated.coordination.client import ClusterError, Committed, SessionInfo
from coordinated.coordination.requests.sessions import (
    SessionCreate,
    SessionEnd,
    SessionKeepAlive,
    session_create_problem,
)
from coordinated.coordination.settings import parse_time_ms
from coordinated.coordination.state import session_binding_to_api
from coordinated.coordination.validation import key_prefix_problem, session_id_problem
from coordinated.sidecar.node import Node
from coordinated.sidecar.web import api_types as t
from coordinated.sidecar.web.access import authorize, permissions_of, principal_of
from coordinated.sidecar.web.app_keys import node_of
from coordinated.sidecar.web.errors import (
    BadRequest,
    FeatureNotAvailable,
    Forbidden,
    master_not_discovered,
    result_error,
)
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
    body = {"id": session_id, **session_binding_to_api(ttl_ms, node_id, node.keys.applied_state.nodes)}
    session = node.keys.applied_state.sessions.get(session_id)
    if session is not None and session.owner is not None:
        body.update(prefix=session.prefix, owner=session.owner)
    return body


def session_prefix(request: web.Request, given: str | None) -> str:
    """The prefix a new session is for: the one given, which the principal must hold `session` on, or the one
    the principal holds it on (every key, or its only prefix)."""
    permissions, node = permissions_of(request), node_of(request)
    if given is not None:
        problem = key_prefix_problem(given)
        if problem is not None:
            raise BadRequest(f"invalid [prefix]: {problem}")
        if given and (off := node.access_control_off()) is not None:
            raise FeatureNotAvailable(f"a session's [prefix] needs access control: {off}")
        authorize(request, permissions, (KeyAccess(SESSION, given, prefix=True),))
        return given
    if permissions is None or permissions.allows(KeyAccess(SESSION, "", prefix=True)):
        return ""
    granted = permissions.granted_prefixes(SESSION)
    if len(granted) == 1:
        return granted[0]
    raise BadRequest(
        f"give the session's [prefix]: principal [{permissions.principal}] holds [session] on several prefixes "
        f"({', '.join(granted)}), and a session is for the keys under one"
    )


def check_owner(request: web.Request, session_id: str, needs_privilege: bool) -> None:
    """A session of another principal is refused (403), as is one whose prefix the principal lost `session` on
    (`needs_privilege`; ending one's own session needs no privilege). The master checks again."""
    permissions = permissions_of(request)
    if permissions is None:
        return
    session = node_of(request).keys.applied_state.sessions.get(session_id)
    view = None if session is None else SessionView(session.owner, session.prefix)
    missing = session_missing(permissions, session_id, view, needs_privilege)
    if missing is not None:
        raise Forbidden(permissions.unauthorized(f"{request.method} {request.path}", missing))


def session_result(
    result: SessionInfo | Committed | ClusterError,
    node: Node,
    status: int = 200,
    created_for: tuple[str, str] | None = None,
) -> web.Response:
    """`created_for`: the prefix and owner of a session just created (this node may not have applied it yet)."""
    if isinstance(result, SessionInfo):
        body = session_body(result.id, result.ttl_ms, result.node, node)
        if created_for is not None:
            body.update(prefix=created_for[0], owner=created_for[1])
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
    create = SessionCreate(ttl_ms=ttl_ms, node_name=body.node, prefix=session_prefix(request, body.prefix))
    problem = session_create_problem(create)
    if problem is not None:
        raise BadRequest(problem)
    node = node_of(request)
    principal = principal_of(request)
    # With access control on, the session records its owner and prefix (as the answer says).
    recorded = principal is not None and node.keys.applied_state.security_metadata() is not None
    created_for = (create.prefix, principal.name) if recorded and principal is not None else None
    return session_result(await node.call(create, timeout_ms), node, status=201, created_for=created_for)


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
        if node.keys.applied_state.master_node is None:
            return master_not_discovered()
        problem = await read_barrier(node, timeout_ms)
        if problem is not None:
            return problem
    state = node.keys.applied_state
    keys: dict[str, list[str]] = {}
    for key, owner in sorted(state.kv_sessions.items()):
        keys.setdefault(owner, []).append(key)
    permissions = permissions_of(request)
    # A principal sees its own sessions (and those made before access control, with no owner); an admin, all.
    mine = None if permissions is None or permissions.admin else permissions.principal
    sessions = [
        {**session_body(session_id, session.ttl_ms, session.node, node), "keys": keys.get(session_id, [])}
        for session_id, session in sorted(state.sessions.items())
        if mine is None or session.owner in (None, mine)
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
    check_owner(request, session, needs_privilege=True)
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
    check_owner(request, session, needs_privilege=False)
    node = node_of(request)
    return session_result(await node.call(SessionEnd(session), timeout_ms), node)
