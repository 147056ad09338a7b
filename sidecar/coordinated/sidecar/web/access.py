"""Who may call what on the client port: one middleware that authenticates every request as a principal and
checks the privilege its route declares against the principal's permissions.

Authentication is the realms' (auth/authenticators.py): a bearer token of `http.auth.tokens_file` or of another
realm, or a client certificate's subject. A request without credentials, or with a token no realm knows, gets
401 `security_exception` with the reason (and `WWW-Authenticate: Bearer realm="coordinated"`); the token itself
is never logged nor echoed.

Authorization is the engine's (coordination/authorization.py), against this node's applied state (its roles and
role mappings). What a route needs is the privilege of its declaration (routes.py); a request that no route
serves (404, 405) needs `manage`. For a key privilege the route also says where the request names its keys:

- the key in the path, or each `prefix` parameter (none: every key), checked here, before the body is read;
- the keys of a body (a transaction's ops and compares), checked by the handler once it has decoded the body
  (`authorize`), and `session` routes, whose handlers check the session's owner and prefix.

A refused principal gets 403 `security_exception` naming what it lacks. The principal goes with the request
(`principal_of`, and `CURRENT_PRINCIPAL` for the calls the handler makes), so that the master checks every
write again against the state it builds: a write that races a change of roles is decided in the order the
cluster commits them.

Without any token realm nothing is checked (the local demo's default).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web

from coordinated.coordination.authorization import KeyAccess, Permissions
from coordinated.coordination.client import Principal
from coordinated.sidecar.auth.authenticators import Authentication, Refused
from coordinated.sidecar.auth.principal import CURRENT_PRINCIPAL
from coordinated.sidecar.auth.tokens_file import Tokens as Tokens
from coordinated.sidecar.web.app_keys import NODE_KEY
from coordinated.sidecar.web.errors import Forbidden
from coordinated.sidecar.web.privileges import Privilege, missing_privilege
from coordinated.sidecar.web.routes import Endpoint, requested_keys

log = logging.getLogger("coordinated.access")

PRINCIPAL_KEY: web.RequestKey[Principal] = web.RequestKey("principal", Principal)
PERMISSIONS_KEY: web.RequestKey[Permissions] = web.RequestKey("permissions", Permissions)


def principal_of(request: web.Request) -> Principal | None:
    """The request's principal; None when the client port authenticates nothing."""
    return request.get(PRINCIPAL_KEY)


def permissions_of(request: web.Request) -> Permissions | None:
    """The permissions of the request's principal by this node's applied roles and mappings; None when the
    client port authenticates nothing (everything is allowed). Those of now: a handler that waited (a long
    poll) asks again, by the state applied since."""
    principal = principal_of(request)
    if principal is None:
        return None
    if NODE_KEY in request.app:
        return request.app[NODE_KEY].permissions(principal)
    return request[PERMISSIONS_KEY]


def shows_writers(request: web.Request) -> bool:
    """Whether answers show each key's last writer: to admins (and when nobody is authenticated)."""
    permissions = permissions_of(request)
    return permissions is None or permissions.admin


def security_error(status: int, reason: str) -> web.Response:
    body = {"error": {"type": "security_exception", "reason": reason}, "status": status}
    headers = {"WWW-Authenticate": 'Bearer realm="coordinated"'} if status == 401 else None
    return web.json_response(body, status=status, headers=headers)


PermissionsOf = Callable[[Principal], Permissions]


def action_of(request: web.Request) -> str:
    return f"{request.method} {request.path}"


def authorize(request: web.Request, permissions: Permissions | None, accesses: Iterable[KeyAccess]) -> None:
    """A handler's check of the keys it found in its body: raises Forbidden naming the first one refused.
    `permissions` None: the client port authenticates nothing."""
    if permissions is None:
        return
    missing = permissions.missing(accesses)
    if missing is not None:
        raise Forbidden(permissions.unauthorized(action_of(request), missing))


def access_middleware(
    authentication: Authentication,
    endpoint_of: Callable[[web.Request], Endpoint | None],
    privilege_of: Callable[[web.Request], Privilege],
    permissions_of: PermissionsOf,
    on_refused: Callable[[int], None] = lambda status: None,
) -> Callable[..., Awaitable[web.StreamResponse]]:
    """`endpoint_of(request)` is the declaration of the route that will handle the request (None when no route
    serves it) and `privilege_of(request)` what it needs (that of no route when none serves it);
    `permissions_of(principal)` the principal's permissions by this node's applied state; `on_refused(status)` is
    called for each 401 and 403 (for the request metrics)."""

    def refuse(status: int, reason: str) -> web.Response:
        on_refused(status)
        return security_error(status, reason)

    async def authenticate(request: web.Request) -> Principal | web.Response:
        scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
        token = credentials.strip()
        if not scheme and not token:
            transport = request.transport
            principal = authentication.certificate_principal(
                transport.get_extra_info("peercert") if transport is not None else None
            )
            if principal is not None:
                return principal
            return refuse(401, f"missing authentication credentials for REST request [{request.method} {request.path}]")
        if scheme.lower() != "bearer" or not token:
            return refuse(401, f"unsupported authentication scheme for REST request [{request.path}]: use Bearer")
        found = await authentication.authenticate_token(token)
        if isinstance(found, Principal):
            return found
        if isinstance(found, Refused):
            log.info("refused %s %s from %s: %s", request.method, request.path, request.remote, found.reason)
            return refuse(401, f"unable to authenticate the token for REST request [{request.path}]: {found.reason}")
        tokens = authentication.tokens
        if tokens is not None and tokens.problem is not None:
            return refuse(
                401,
                f"unable to authenticate the token for REST request [{request.path}]: this node's tokens file is "
                "not usable now, so it accepts no token (its /readyz and log say why)",
            )
        log.info("refused %s %s from %s: unknown token", request.method, request.path, request.remote)
        return refuse(401, f"unable to authenticate with the provided token for REST request [{request.path}]")

    def missing(request: web.Request, endpoint: Endpoint | None, permissions: Permissions) -> str | None:
        targets = () if endpoint is None else requested_keys(endpoint.route.keys, request)
        pairs = None if targets is None else tuple((target.name, target.prefix) for target in targets)
        return missing_privilege(privilege_of(request), pairs, permissions)

    @web.middleware
    async def check_access(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        endpoint = endpoint_of(request)
        if endpoint is not None and not endpoint.route.needs_credentials:
            return await handler(request)
        principal = await authenticate(request)
        if isinstance(principal, web.Response):
            return principal
        permissions = permissions_of(principal)
        lacking = missing(request, endpoint, permissions)
        if lacking is not None:
            return refuse(403, permissions.unauthorized(action_of(request), lacking))
        request[PRINCIPAL_KEY] = principal
        request[PERMISSIONS_KEY] = permissions
        token = CURRENT_PRINCIPAL.set(principal)
        try:
            return await handler(request)  # a handler's Forbidden is answered by the errors middleware
        finally:
            CURRENT_PRINCIPAL.reset(token)

    return check_access
