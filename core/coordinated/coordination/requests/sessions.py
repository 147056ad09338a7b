"""The session requests: create (a TTL session, or one bound to a node's membership), keep alive, and end;
each type with what the core does with it (base.Action). The master's leases are sessions.py's, one level
up."""

from __future__ import annotations

from typing import Any

from coordinated.coordination import client
from coordinated.coordination.batch_draft import Draft, Result
from coordinated.coordination.client import ClientRequest, ClientResult, ClusterError, Committed, SessionInfo
from coordinated.coordination.requests.base import Action, Master, Reply, Runs
from coordinated.coordination.settings import format_time_ms, parse_node_name
from coordinated.coordination.state import Long, Session
from coordinated.coordination.validation import session_id_problem

# TTL bounds. The lower one keeps a session above the time a master needs to notice a keepalive at all; the
# upper one (Consul's) keeps an abandoned session from holding its keys for days.
MIN_SESSION_TTL_MS = 1_000
MAX_SESSION_TTL_MS = 86_400_000
MAX_SESSIONS = 10_000  # in the cluster state at once


class SessionCreate(ClientRequest[SessionInfo | Committed], frozen=True, tag="session_create"):
    """A TTL session (`ttl_ms`), or a session bound to the membership of the node named `node_name`."""

    ttl_ms: Long = 0
    node_name: str | None = None


def session_create_problem(request: SessionCreate) -> str | None:
    """Exactly one of [ttl] and [node]; a TTL within the bounds; a well-formed node name."""
    if (request.ttl_ms > 0) == (request.node_name is not None):
        return 'a session needs exactly one of [ttl] (e.g. {"ttl": "10s"}) and [node] (a node name)'
    if request.node_name is not None:
        try:
            parse_node_name(request.node_name)
        except ValueError as error:
            return f"invalid [node]: {error}"
        return None
    if not MIN_SESSION_TTL_MS <= request.ttl_ms <= MAX_SESSION_TTL_MS:
        return (
            f"invalid [ttl]: [{format_time_ms(request.ttl_ms)}] is outside "
            f"[{format_time_ms(MIN_SESSION_TTL_MS)}] to [{format_time_ms(MAX_SESSION_TTL_MS)}]"
        )
    return None


def _create_session(request: SessionCreate, draft: Draft) -> Result:
    keys, nodes = draft.keys, draft.nodes
    new_uuid = draft.context.new_uuid()
    if len(keys.sessions) >= MAX_SESSIONS:
        return client.bad_request(f"cannot create more than [{MAX_SESSIONS}] sessions")
    node_id: str | None = None
    if request.node_name is not None:
        node_id = next((node.id for node in nodes.values() if node.name == request.node_name), None)
        if node_id is None:
            return client.bad_request(f"node [{request.node_name}] is not in the cluster: cannot bind a session to it")
    ttl_ms = request.ttl_ms if node_id is None else 0
    keys.add_session(new_uuid, Session(ttl_ms, node_id, keys.new_version))
    return SessionInfo(new_uuid, ttl_ms, node_id, 0, 0, remaining_ms=ttl_ms)


CREATE = Action(
    SessionCreate,
    Runs.MASTER,
    validate=lambda request, state, settings: session_create_problem(request),
    execute=_create_session,
)


class SessionKeepAlive(ClientRequest[SessionInfo | Committed], frozen=True, tag="session_keepalive"):
    """Renews a TTL session on the master, which confirms its leadership first; no publication."""

    session: str


def _keepalive(request: SessionKeepAlive, reply: Reply, deadline: int, master: Master) -> None:
    """Renewed on this master, but only once it has confirmed with a quorum that it still leads (as etcd
    does since a deposed leader renewed leases): a deposed master cannot acknowledge a keepalive that the
    new master never hears of. The renewal counts from the arrival; the leases answer it (sessions.py)."""
    session, arrived = request.session, master.now
    if session not in master.state.sessions:
        master.confirm(lambda barrier: reply(_unless_error(barrier, session)))
        return

    def after_barrier(barrier: ClientResult) -> None:
        if not isinstance(barrier, Committed):
            reply(barrier)
            return
        master.renew_session(session, arrived, reply)

    master.confirm(after_barrier)


def _unless_error(barrier: ClientResult, session: str) -> ClientResult:
    """A session this master does not hold is not found, once the master has confirmed that it leads."""
    return barrier if isinstance(barrier, ClusterError) else client.session_not_found_error(session)


KEEPALIVE = Action(
    SessionKeepAlive,
    Runs.READ,
    validate=lambda request, state, settings: session_id_problem(request.session),
    on_master=_keepalive,
)


class SessionEnd(ClientRequest[SessionInfo | Committed], frozen=True, tag="session_end"):
    session: str


def _end_session(request: SessionEnd, draft: Draft) -> Result:
    return None if draft.keys.end_session(request.session) else client.session_not_found_error(request.session)


END = Action(
    SessionEnd,
    Runs.MASTER,
    validate=lambda request, state, settings: session_id_problem(request.session),
    execute=_end_session,
    confirm_unwritten=True,
)

ACTIONS: tuple[Action[Any], ...] = (CREATE, KEEPALIVE, END)
