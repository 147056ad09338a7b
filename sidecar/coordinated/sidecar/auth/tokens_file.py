"""`http.auth.tokens_file`: bearer tokens, each the credential of one named principal with one role.

One token per line, `ROLE TOKEN [NAME]` (blank lines and `#` comments are ignored):

- ROLE is a built-in role (`admin`, `writer`, `reader`), a custom role (defined with `PUT /_security/role/NAME`;
  until it is, it grants nothing), or `none`: the principal's roles then come from role mappings only;
- TOKEN is at least 16 characters;
- NAME is the principal's name, which role mappings and the keys' last writers name; a line without one is
  named after its role, so a file of `ROLE TOKEN` lines keeps working as before. Several lines may name one
  principal (a token being rotated), with one role.

The file is re-read when it changes (checked at most once per `CHECK_INTERVAL_S`). It fails closed: while it is
missing, unreadable or does not parse, every token is refused (see `Tokens`). Tokens are compared in constant
time, and never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from coordinated.coordination.client import Principal
from coordinated.coordination.security import (
    ADMIN,
    BUILT_IN_ROLES,
    MAX_PRINCIPAL_LENGTH,
    NO_ROLE,
    REALM_FILE,
    name_problem,
)

log = logging.getLogger("coordinated.access")

CHECK_INTERVAL_S = 1.0
MIN_TOKEN_LENGTH = 16
# Names of this form are the Kubernetes ServiceAccounts' (system:serviceaccount:NS:NAME): never a line's.
RESERVED_NAME_START = "system:"


class TokensFileError(ValueError):
    pass


def _line_problem(role: str, name: str) -> str | None:
    if role != NO_ROLE and role not in BUILT_IN_ROLES:
        problem = name_problem(role, "role")
        if problem is not None:
            return f"has {problem}; a role is admin, writer, reader, a custom role's name or none"
    if len(name) > MAX_PRINCIPAL_LENGTH or not name.isprintable():
        return f"has an invalid principal name: at most {MAX_PRINCIPAL_LENGTH} printable characters"
    if name.startswith(RESERVED_NAME_START):
        return f"names principal [{name}], but names starting with [{RESERVED_NAME_START}] are Kubernetes' own"
    return None


def parse_tokens(text: str, path: str) -> list[tuple[bytes, Principal]]:
    tokens: list[tuple[bytes, Principal]] = []
    roles_by_name: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        parts = stripped.split()
        if len(parts) not in (2, 3):
            raise TokensFileError(f"line {number} of [{path}] must be `ROLE TOKEN` or `ROLE TOKEN NAME`")
        role, token = parts[0], parts[1]
        name = parts[2] if len(parts) == 3 else role
        problem = _line_problem(role, name)
        if problem is not None:
            raise TokensFileError(f"line {number} of [{path}] {problem}")
        if len(token) < MIN_TOKEN_LENGTH:
            raise TokensFileError(
                f"the token on line {number} of [{path}] is shorter than {MIN_TOKEN_LENGTH} characters"
            )
        if roles_by_name.setdefault(name, role) != role:
            raise TokensFileError(
                f"line {number} of [{path}] gives principal [{name}] role [{role}], but an earlier line gave it "
                f"[{roles_by_name[name]}]: a principal has one role in the file"
            )
        principal = Principal(name, REALM_FILE, () if role == NO_ROLE else (role,))
        tokens.append((_digest(token), principal))
    if not tokens:
        raise TokensFileError(f"[{path}] holds no tokens")
    return tokens


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def load_tokens(path: str) -> list[tuple[bytes, Principal]]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise TokensFileError(f"cannot read [{path}]: {error}") from None
    return parse_tokens(text, path)


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
        # Called after the file was read again (or found unusable), with the principals it holds now.
        self.on_change: Callable[[frozenset[Principal]], None] = lambda principals: None
        self._fingerprint = _fingerprint(path)
        self._tokens = load_tokens(path)
        self._checked_at = clock()
        self.problem: str | None = None  # why no token is valid now; None while the file is usable

    def principal_of(self, token: str) -> Principal | None:
        self.check()
        candidate = _digest(token)
        found: Principal | None = None
        # Every entry compared, each in constant time; digests, so that a token's length does not show either.
        for known, principal in self._tokens:
            if hmac.compare_digest(known, candidate) and found is None:
                found = principal
        return found

    def principals(self) -> frozenset[Principal]:
        """The principals of the tokens valid now."""
        return frozenset(principal for _, principal in self._tokens)

    def admins(self) -> list[str]:
        """The principals the file makes admins (whatever the role mappings say, they stay admins)."""
        return sorted({principal.name for _, principal in self._tokens if ADMIN in principal.roles})

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
            self.on_change(self.principals())
            return
        self._tokens = tokens
        if self.problem is not None:
            log.warning("[http.auth.tokens_file] is usable again: %s", self.path)
        else:
            log.info("reloaded the tokens of [http.auth.tokens_file] from %s", self.path)
        self.problem = None
        self.on_change(self.principals())
