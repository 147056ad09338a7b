"""Who may call what on the client port: bearer tokens with roles, checked by one middleware.

`http.auth.tokens_file` holds one `ROLE TOKEN` pair per line (blank lines and `#` comments are ignored); the
roles are `reader` < `writer` < `admin`, each allowed everything the one before it is. A request carries
`Authorization: Bearer TOKEN`. A missing or unknown token gets 401 `security_exception`, a known token whose
role is below what the route needs gets 403 `security_exception`. What a route needs is the privilege of its
declaration (routes.py), and the role is the lowest built-in role that holds it (privileges.py); a request
that no route serves (404, 405) needs `admin`. The file is re-read when it changes (checked at most once per
`CHECK_INTERVAL_S`); while it is missing, unreadable or does not parse, every token is refused (see `Tokens`).
Tokens are compared in constant time.

Without `http.auth.tokens_file` nothing is checked (the local demo's default).
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from coordinated.sidecar.web.access_settings import TokensFileError, load_tokens, token_digest
from coordinated.sidecar.web.privileges import Privilege, Role, role_for

log = logging.getLogger("coordinated.access")

CHECK_INTERVAL_S = 1.0


def _fingerprint(path: str) -> tuple[int, int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_ino, stat.st_mtime_ns, stat.st_size)


class Tokens:
    """The tokens of a tokens file, re-read when the file changes (looked at, with a `stat`, at most once per
    CHECK_INTERVAL_S). It fails closed: while the file is missing, unreadable or does not parse, no token is
    valid, and `problem` says why (health, readiness and the log show it); the tokens come back with a file that
    parses. So deleting the file, or breaking it, revokes every token rather than keeping the old ones."""

    def __init__(self, path: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._clock = clock
        self._fingerprint = _fingerprint(path)
        self._tokens = load_tokens(path)
        self._checked_at = clock()
        self.problem: str | None = None  # why no token is valid now; None while the file is usable

    def role_of(self, token: str) -> Role | None:
        self.check()
        candidate = token_digest(token)
        found: Role | None = None
        # Every entry compared, each in constant time; digests, so that a token's length does not show either.
        for known, role in self._tokens:
            if hmac.compare_digest(known, candidate) and found is None:
                found = role
        return found

    def check(self) -> None:
        """Re-read the file if it changed, at most once per CHECK_INTERVAL_S."""
        now = self._clock()
        if now - self._checked_at >= CHECK_INTERVAL_S:
            self._checked_at = now
            self._reload_if_changed()

    def _reload_if_changed(self) -> None:
        fingerprint = _fingerprint(self.path)
        if fingerprint is not None and fingerprint == self._fingerprint:
            return
        self._fingerprint = fingerprint
        try:
            tokens = load_tokens(self.path)
        except TokensFileError as error:
            self._tokens = []
            problem = f"[http.auth.tokens_file] is not usable ({error}): every token is refused until it is"
            if problem != self.problem:
                log.warning("%s", problem)
            self.problem = problem
            return
        self._tokens = tokens
        if self.problem is not None:
            log.warning("[http.auth.tokens_file] is usable again: %s", self.path)
        else:
            log.info("reloaded the tokens of [http.auth.tokens_file] from %s", self.path)
        self.problem = None


def _security_error(status: int, reason: str) -> web.Response:
    body = {"error": {"type": "security_exception", "reason": reason}, "status": status}
    headers = {"WWW-Authenticate": 'Bearer realm="coordinated"'} if status == 401 else None
    return web.json_response(body, status=status, headers=headers)


def access_middleware(
    tokens: Tokens,
    privilege_of: Callable[[web.Request], Privilege],
    on_refused: Callable[[int], None] = lambda status: None,
) -> Callable[..., Awaitable[web.StreamResponse]]:
    """`privilege_of(request)` is what the route that will handle the request needs (its declaration's; that of
    `admin` when no route serves it); `on_refused(status)` is called for each 401 and 403 (for the request
    metrics)."""

    def refuse(status: int, reason: str) -> web.Response:
        on_refused(status)
        return _security_error(status, reason)

    @web.middleware
    async def check_access(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        needed = role_for(privilege_of(request))
        if needed is Role.OPEN:
            return await handler(request)
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return refuse(401, f"missing authentication credentials for REST request [{request.method} {request.path}]")
        role = tokens.role_of(token.strip())
        if role is None and tokens.problem is not None:
            return refuse(
                401,
                f"unable to authenticate the token for REST request [{request.path}]: this node's tokens file is "
                "not usable now, so it accepts no token (its /readyz and log say why)",
            )
        if role is None:
            log.info("refused %s %s from %s: unknown token", request.method, request.path, request.remote)
            return refuse(401, f"unable to authenticate with the provided token for REST request [{request.path}]")
        if role < needed:
            return refuse(
                403,
                f"action [{request.method} {request.path}] is unauthorized for a token with role [{role.name.lower()}]; "
                f"it needs role [{needed.name.lower()}]",
            )
        return await handler(request)

    return check_access
