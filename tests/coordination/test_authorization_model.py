"""Access control against a reference model of its rules, both ways: for random principals, roles, role mappings
and sessions, and random requests of every type, nothing is allowed that the model denies and nothing is denied
that it allows.

The requests go through the code that decides them in the product:

- a request the master decides (`authorization.request_missing`, which the batch and the master's reads run):
  gets, puts (persistent and ephemeral), deletes, prefix deletes, transactions with compares and both branches,
  session creates, keepalives and ends, settings, exclusions, repositories, restores, and the security changes;
- a request a node decides as it arrives, by its route's declaration (`ServedRoutes` resolves the path, as aiohttp
  does for the access middleware; `requested_keys` and `missing_privilege` decide): key reads, range reads,
  prefix deletes, watches and streams with several prefixes, the cluster's routes and the security routes; and a
  transaction's body (`txn_accesses`, the handler's check).

The model is written from the documented rules alone (docs/sidecar.md, "Access control"), naively: no
compilation, no cache, no index.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinated.coordination.authorization import Authorizer, SessionView, request_missing
from coordinated.coordination.client import Principal
from coordinated.coordination.requests import action_of
from coordinated.coordination.requests.cluster import ClearVotingConfigExclusions, UpdateSettings
from coordinated.coordination.requests.keys import KvDelete, KvDeletePrefix, KvGet, KvPut, ReadBarrier
from coordinated.coordination.requests.security import ACTIONS as SECURITY_ACTIONS
from coordinated.coordination.requests.security import DeleteRoleMapping, PutQuota, PutRole
from coordinated.coordination.requests.sessions import SessionCreate, SessionEnd, SessionKeepAlive
from coordinated.coordination.requests.snapshots import DeleteRepository
from coordinated.coordination.requests.transactions import Txn, TxnCompare, TxnOp, txn_accesses
from coordinated.coordination.security import KeyGrant, Quota, RoleDescriptor, RoleMapping, SecurityMetadata
from coordinated.sidecar.web.app import ServedRoutes
from coordinated.sidecar.web.privileges import missing_privilege
from coordinated.sidecar.web.routes import requested_keys

# -- the model ------------------------------------------------------------------------------------------------

KEY_PRIVILEGES = ("read", "write", "session")
SECURITY_REQUESTS = tuple(action.request for action in SECURITY_ACTIONS)
CLUSTER_PRIVILEGES = ("monitor", "manage")


def model_roles(name: str, realm_roles: tuple[str, ...], mappings: dict[str, RoleMapping]) -> set[str]:
    """A principal's roles: its realm's, and those of every mapping that names it (a name, or a start and `*`)."""
    roles = set(realm_roles)
    for mapping in mappings.values():
        for pattern in mapping.principals:
            if pattern == name or (pattern.endswith("*") and name.startswith(pattern[:-1])):
                roles |= set(mapping.roles)
    return roles


def model_key(roles: set[str], defs: dict[str, RoleDescriptor], privilege: str, target: str) -> bool:
    """`privilege` on a key, or on every key under a prefix: granted when a role grants it on a prefix that the
    key (or the prefix) starts with; `admin` and `writer` hold every key privilege on every key, `reader` read."""
    if "admin" in roles or "writer" in roles:
        return True
    if "reader" in roles and privilege == "read":
        return True
    for role in roles:
        described = defs.get(role)
        if described is None:
            continue
        for grant in described.keys:
            if privilege in grant.privileges and any(target.startswith(prefix) for prefix in grant.prefixes):
                return True
    return False


def model_cluster(roles: set[str], defs: dict[str, RoleDescriptor], privilege: str) -> bool:
    if "admin" in roles:
        return True
    if privilege == "security":
        return False  # the built-in admin's alone
    if privilege == "monitor" and ("writer" in roles or "reader" in roles):
        return True
    return any(privilege in defs[role].cluster for role in roles if role in defs)


@dataclass(frozen=True)
class ModelSession:
    owner: str | None
    prefix: str


def model_session_use(
    roles: set[str], defs: dict[str, RoleDescriptor], name: str, session: ModelSession | None, privilege: bool
) -> bool:
    """A session belongs to its creator: only it (or an admin) uses it, and, but to end it, only while it holds
    `session` on the session's prefix. A session that does not exist is the master's 404, not a refusal."""
    if session is None or "admin" in roles:
        return True
    if session.owner is not None and session.owner != name:
        return False
    return not privilege or model_key(roles, defs, "session", session.prefix)


def model_allows(request: Any, roles: set[str], defs: dict[str, RoleDescriptor], name: str, sessions: dict) -> bool:
    """Whether the rules allow a core request (as the master decides it)."""

    def key(privilege: str, target: str) -> bool:
        return model_key(roles, defs, privilege, target)

    def uses(session_id: str, privilege: bool = True) -> bool:
        return model_session_use(roles, defs, name, sessions.get(session_id), privilege)

    if "admin" in roles:
        return True
    if isinstance(request, KvGet):
        return key("read", request.key)
    if isinstance(request, KvPut):
        if request.session is None:
            return key("write", request.key)
        return key("write", request.key) and key("session", request.key) and uses(request.session)
    if isinstance(request, KvDelete):
        return key("write", request.key)
    if isinstance(request, KvDeletePrefix):
        return key("write", request.prefix)
    if isinstance(request, Txn):
        # A transaction is a write: `write` on every key it names, `read` too on those it reads.
        ok = all(key("read", compare.key) and key("write", compare.key) for compare in request.compare)
        for op in (*request.success, *request.failure):
            if op.op == "get":
                ok = ok and key("read", op.key) and key("write", op.key)
            elif op.op == "delete_prefix":
                ok = ok and key("write", op.prefix or "")
            else:
                ok = ok and key("write", op.key)
                if op.op == "put" and op.session is not None:
                    ok = ok and key("session", op.key) and uses(op.session)
        return ok
    if isinstance(request, SessionCreate):
        return key("session", request.prefix)
    if isinstance(request, SessionKeepAlive):
        return uses(request.session)
    if isinstance(request, SessionEnd):
        return uses(request.session, privilege=False)
    if isinstance(request, ReadBarrier):
        return True
    if isinstance(request, SECURITY_REQUESTS):
        return False  # admin only, handled above
    return model_cluster(roles, defs, "manage")  # settings, exclusions, repositories, restores


# What each route needs, from the docs' table of routes, for the model of the node's check.
ROUTE_RULES: dict[tuple[str, str], tuple[str, str]] = {
    # (method, path kind) -> (kind of privilege, privilege)
    ("GET", "key"): ("key", "read"),
    ("PUT", "key"): ("key", "write"),
    ("DELETE", "key"): ("key", "write"),
    ("GET", "range"): ("key", "read"),
    ("DELETE", "range"): ("key", "write"),
    ("GET", "watch"): ("key", "read"),
    ("GET", "state"): ("key", "read"),  # every key: the state holds them
    ("GET", "health"): ("cluster", "monitor"),
    ("GET", "metrics"): ("cluster", "monitor"),
    ("PUT", "settings"): ("cluster", "manage"),
    ("GET", "snapshots"): ("cluster", "manage"),
    ("PUT", "role"): ("cluster", "security"),
    ("GET", "quota"): ("cluster", "monitor"),
    ("PUT", "quota"): ("cluster", "security"),
    ("GET", "whoami"): ("none", ""),
    ("POST", "unrouted"): ("cluster", "manage"),  # a request no route serves
}


# -- the generators -------------------------------------------------------------------------------------------

SEGMENTS = ("a", "b", "ab", "x")
NAMES = ("app-a", "app-b", "ops", "system:serviceaccount:team-a:web", "system:serviceaccount:team-b:web")
ROLE_NAMES = ("r1", "r2", "r3", "gone")  # `gone` is mapped but never defined: it grants nothing

keys = st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=3).map("/".join)
prefixes = st.one_of(st.just(""), keys, keys.map(lambda key: key + "/"), keys.map(lambda key: key[:-1] or key))
privilege_lists = st.lists(st.sampled_from(KEY_PRIVILEGES), min_size=1, max_size=3, unique=True)
grants = st.builds(KeyGrant, st.lists(prefixes, min_size=1, max_size=2).map(tuple), privilege_lists.map(tuple))
role_descriptors = st.builds(
    RoleDescriptor,
    st.lists(grants, max_size=3).map(tuple),
    st.lists(st.sampled_from(CLUSTER_PRIVILEGES), max_size=2, unique=True).map(tuple),
)
patterns = st.one_of(
    st.sampled_from(NAMES),
    st.sampled_from(("app-*", "system:serviceaccount:team-a:*", "system:serviceaccount:*", "*")),
)
mappings = st.builds(
    RoleMapping,
    st.lists(st.sampled_from((*ROLE_NAMES, "reader", "writer", "admin")), min_size=1, max_size=2).map(tuple),
    st.lists(patterns, min_size=1, max_size=2).map(tuple),
)
securities = st.builds(
    SecurityMetadata,
    st.dictionaries(st.sampled_from(ROLE_NAMES[:3]), role_descriptors, max_size=3),
    st.dictionaries(st.sampled_from(("m1", "m2", "m3", "m4")), mappings, max_size=4),
)
principals = st.builds(
    Principal,
    st.sampled_from(NAMES),
    st.sampled_from(("file", "certificate", "kubernetes")),
    st.one_of(st.just(()), st.sampled_from(("reader", "writer", "admin", "r1", "gone")).map(lambda r: (r,))),
)
session_ids = st.sampled_from(("s1", "s2", "s3", "missing"))
session_tables = st.dictionaries(
    st.sampled_from(("s1", "s2", "s3")),
    st.builds(ModelSession, st.one_of(st.none(), st.sampled_from(NAMES)), prefixes),
    max_size=3,
)
txn_ops = st.one_of(
    st.builds(TxnOp, st.just("get"), keys),
    st.builds(TxnOp, st.just("put"), keys, st.just(1), st.one_of(st.none(), session_ids)),
    st.builds(TxnOp, st.just("delete"), keys),
    st.builds(lambda prefix: TxnOp("delete_prefix", prefix=prefix), prefixes),
)
core_requests = st.one_of(
    st.builds(KvGet, keys),
    st.builds(KvPut, keys, st.just(1), st.none(), st.one_of(st.none(), session_ids)),
    st.builds(KvDelete, keys),
    st.builds(KvDeletePrefix, prefixes),
    st.builds(
        Txn,
        st.lists(st.builds(TxnCompare, keys, st.just(0)), max_size=2).map(tuple),
        st.lists(txn_ops, max_size=3).map(tuple),
        st.lists(txn_ops, max_size=2).map(tuple),
    ),
    st.builds(lambda prefix: SessionCreate(ttl_ms=10_000, prefix=prefix), prefixes),
    st.builds(SessionKeepAlive, session_ids),
    st.builds(SessionEnd, session_ids),
    st.just(ReadBarrier()),
    st.just(UpdateSettings({"cluster.no_master_block": "all"})),
    st.just(ClearVotingConfigExclusions()),
    st.builds(DeleteRepository, st.just("r")),
    st.builds(PutRole, st.just("r1"), st.just(RoleDescriptor())),
    st.builds(DeleteRoleMapping, st.just("m1")),
    st.builds(PutQuota, st.just("q"), st.just(Quota("a/", max_keys=1))),
)


def enc(key: str) -> str:
    return quote(key, safe="/")


route_requests = st.one_of(
    st.tuples(st.sampled_from(("GET", "PUT", "DELETE")), st.just("key"), keys.map(lambda k: (k,))),
    st.tuples(st.sampled_from(("GET", "DELETE")), st.just("range"), prefixes.map(lambda p: (p,))),
    st.tuples(st.just("GET"), st.just("watch"), st.lists(prefixes, min_size=1, max_size=3).map(tuple)),
    st.tuples(
        st.sampled_from([rule for rule in ROUTE_RULES if rule[1] not in ("key", "range", "watch")]).map(lambda r: r[0]),
        st.just("other"),
        st.just(()),
    ),
)

OTHER_PATHS = {
    ("GET", "state"): "/_cluster/state",
    ("GET", "health"): "/_cluster/health",
    ("GET", "metrics"): "/metrics",
    ("PUT", "settings"): "/_cluster/settings",
    ("GET", "snapshots"): "/_snapshot",
    ("PUT", "role"): "/_security/role/r9",
    ("GET", "quota"): "/_quota/q",
    ("PUT", "quota"): "/_quota/q",
    ("GET", "whoami"): "/_security/_authenticate",
    ("POST", "unrouted"): "/_no/such/route",
}


# -- the product's decisions ------------------------------------------------------------------------------------

_SERVED = ServedRoutes()
_APP = web.Application()
_SERVED.register(_APP.router)


def node_decision(method: str, path: str, permissions: Any) -> bool:
    """Whether the node lets the request through, as the access middleware decides."""
    request = make_mocked_request(method, path, app=_APP)
    request._match_info = asyncio.run(_APP.router.resolve(request))  # as aiohttp sets it before the middlewares
    endpoint = _SERVED.endpoint_of(request)
    targets = () if endpoint is None else requested_keys(endpoint.route.keys, request)
    pairs = None if targets is None else tuple((target.name, target.prefix) for target in targets)
    return missing_privilege(_SERVED.privilege_of(request), pairs, permissions) is None


def master_decision(request: Any, permissions: Any, sessions: dict[str, ModelSession]) -> bool:
    def session_of(session_id: str) -> SessionView | None:
        found = sessions.get(session_id)
        return None if found is None else SessionView(found.owner, found.prefix)

    return request_missing(request, action_of(request).access, permissions, session_of) is None


def route_case(method: str, kind: str, targets: tuple[str, ...]) -> tuple[str, tuple[str, str], tuple[str, ...]]:
    """The path of a route request, its rule, and the keys (or prefixes) it names."""
    if kind == "key":
        return f"/_cluster/metadata/{enc(targets[0])}", ROUTE_RULES[(method, "key")], targets
    if kind == "range":
        return f"/_cluster/metadata?prefix={quote(targets[0], safe='')}", ROUTE_RULES[(method, "range")], targets
    if kind == "watch":
        query = "&".join(f"prefix={quote(prefix, safe='')}" for prefix in targets)
        return f"/_cluster/metadata/_watch?stream=true&{query}", ROUTE_RULES[(method, "watch")], targets
    rule_key = next(rule for rule in OTHER_PATHS if rule[0] == method)
    return OTHER_PATHS[rule_key], ROUTE_RULES[rule_key], ("",) if rule_key == ("GET", "state") else ()


def model_route(rule: tuple[str, str], targets: tuple[str, ...], roles: set[str], defs: dict) -> bool:
    kind, privilege = rule
    if kind == "none":
        return True
    if kind == "cluster":
        return model_cluster(roles, defs, privilege)
    return all(model_key(roles, defs, privilege, target) for target in targets)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(securities, principals, session_tables, core_requests)
def test_the_master_allows_a_request_exactly_when_the_model_does(
    security: SecurityMetadata, principal: Principal, sessions: dict, request: Any
) -> None:
    permissions = Authorizer().permissions(principal, security)
    roles = model_roles(principal.name, principal.roles, security.role_mappings)
    expected = model_allows(request, roles, security.roles, principal.name, sessions)
    assert master_decision(request, permissions, sessions) == expected, (request, roles)
    assert set(permissions.roles) == roles


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(securities, principals, route_requests)
def test_a_node_lets_a_request_through_exactly_when_the_model_allows_it(
    security: SecurityMetadata, principal: Principal, route: tuple[str, str, tuple[str, ...]]
) -> None:
    method, kind, targets = route
    path, rule, named = route_case(method, kind, targets)
    permissions = Authorizer().permissions(principal, security)
    roles = model_roles(principal.name, principal.roles, security.role_mappings)
    expected = model_route(rule, named, roles, security.roles)
    assert node_decision(method, path, permissions) == expected, (method, path, roles)


@settings(max_examples=200, deadline=None)
@given(securities, principals, st.lists(txn_ops, max_size=4), st.lists(keys, max_size=3))
def test_a_node_checks_a_transaction_body_as_the_model_does_without_its_sessions(
    security: SecurityMetadata, principal: Principal, ops: list[TxnOp], compared: list[str]
) -> None:
    """The handler checks each compare and op of both branches before forwarding (sessions: the master)."""
    txn = Txn(tuple(TxnCompare(key, 0) for key in compared), tuple(ops[:2]), tuple(ops[2:]))
    permissions = Authorizer().permissions(principal, security)
    roles = model_roles(principal.name, principal.roles, security.role_mappings)
    expected = model_allows(txn, roles, security.roles, principal.name, {})
    assert (permissions.missing(txn_accesses(txn)) is None) == expected


def test_the_comparison_sees_both_outcomes_often() -> None:
    """The generators make requests that are allowed and requests that are denied, in fair numbers, so the
    properties above test both directions (the same generators, drawn deterministically)."""
    master: Counter[bool] = Counter()
    node: Counter[bool] = Counter()

    @settings(max_examples=300, derandomize=True, database=None, deadline=None)
    @given(securities, principals, session_tables, core_requests, route_requests)
    def draw(
        security: SecurityMetadata,
        principal: Principal,
        sessions: dict,
        request: Any,
        route: tuple[str, str, tuple[str, ...]],
    ) -> None:
        roles = model_roles(principal.name, principal.roles, security.role_mappings)
        master[model_allows(request, roles, security.roles, principal.name, sessions)] += 1
        _, rule, named = route_case(*route)
        node[model_route(rule, named, roles, security.roles)] += 1

    draw()
    for outcomes in (master, node):
        assert outcomes[True] >= 60 and outcomes[False] >= 60, outcomes
