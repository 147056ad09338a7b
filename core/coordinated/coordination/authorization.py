"""The authorization engine: what a principal may do, decided from its roles and the cluster's role mappings, for
every node and for the master alike. Pure functions and a cache; no I/O.

A principal's **roles** are those its realm gave it (a tokens-file line's) and those of every role mapping that
names it, as of one `SecurityMetadata`. Its **permissions** are the union of what those roles grant:

- `admin` holds everything, `security` included (the `/_security` and `/_quota` changes);
- `writer` holds `monitor`, and `read`, `write` and `session` on every key;
- `reader` holds `monitor` and `read` on every key;
- a custom role holds its key grants (privileges on the keys under its prefixes) and its cluster privileges;
  a role that no longer exists grants nothing.

A request is allowed when every access it makes is: a key access names a privilege and a key, or a privilege
and a prefix (every key under it); either is allowed when one granted prefix of that privilege starts it. So a
range read, prefix delete or watch of a prefix needs the privilege on the whole prefix, not only on some keys
under it. A transaction is a write: it needs `write` on every key it names and `read` too on each it reads
(compares and gets), in both branches (the branch that runs is known only on the master, as etcd checks them);
a put bound to a session needs `session` on its key too. A session belongs to the principal that created it: only that
principal (or an admin) keeps it alive, ends it or binds keys to it.

`Permissions` are compiled once per principal and `SecurityMetadata` (`Authorizer` caches them), so that a
check is a `str.startswith` over a tuple of prefixes: the cost per request does not grow with the number of
roles or mappings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from coordinated.coordination.client import ClusterError, Principal
from coordinated.coordination.security import (
    ADMIN,
    CLUSTER_PRIVILEGES,
    EMPTY_SECURITY,
    KEY_PRIVILEGES,
    READER,
    WILDCARD,
    WRITER,
    RoleDescriptor,
    SecurityMetadata,
)

READ, WRITE, SESSION = KEY_PRIVILEGES
MONITOR, MANAGE = CLUSTER_PRIVILEGES
# Held by `admin` alone: changing roles, role mappings and quotas. Not a privilege a custom role may grant.
SECURITY = "security"
ALL_KEYS = ("",)
SECURITY_EXCEPTION = "security_exception"


class KeyAccess(NamedTuple):
    """One access a request makes: `privilege` on the key `target`, or on every key under it (`prefix`)."""

    privilege: str
    target: str
    prefix: bool = False

    def describe(self) -> str:
        return f"[{self.privilege}] on {'the keys under prefix' if self.prefix else 'key'} [{self.target}]"


@dataclass(frozen=True)
class Permissions:
    """What one principal may do, compiled from its roles."""

    principal: str
    roles: tuple[str, ...]  # its effective roles, sorted: its realm's and its mappings' (unknown ones included)
    cluster: frozenset[str]
    keys: dict[str, tuple[str, ...]]  # a key privilege -> the prefixes it is granted on (`""`: every key)

    @property
    def admin(self) -> bool:
        return SECURITY in self.cluster

    def allows(self, access: KeyAccess) -> bool:
        # A key and a prefix alike: allowed when a granted prefix starts it (`""` starts everything).
        return access.target.startswith(self.keys.get(access.privilege, ()))

    def allows_cluster(self, privilege: str) -> bool:
        return privilege in self.cluster

    def missing(self, accesses: Iterable[KeyAccess]) -> str | None:
        """None when every access is allowed, else the first that is not, described."""
        for access in accesses:
            if not self.allows(access):
                return access.describe()
        return None

    def missing_cluster(self, privilege: str) -> str | None:
        return None if privilege in self.cluster else f"cluster privilege [{privilege}]"

    def unauthorized(self, action: str, missing: str) -> str:
        """The reason of a 403: what the action needs and the principal lacks."""
        roles = ",".join(self.roles)
        return (
            f"action [{action}] is unauthorized for principal [{self.principal}] with roles [{roles}]: "
            f"it needs {missing}"
        )

    def granted_prefixes(self, privilege: str) -> tuple[str, ...]:
        return self.keys.get(privilege, ())


_BUILT_IN: dict[str, tuple[frozenset[str], dict[str, tuple[str, ...]]]] = {
    ADMIN: (frozenset({*CLUSTER_PRIVILEGES, SECURITY}), dict.fromkeys(KEY_PRIVILEGES, ALL_KEYS)),
    WRITER: (frozenset({MONITOR}), dict.fromkeys(KEY_PRIVILEGES, ALL_KEYS)),
    READER: (frozenset({MONITOR}), {READ: ALL_KEYS}),
}


def minimal_prefixes(prefixes: Iterable[str]) -> tuple[str, ...]:
    """The prefixes without any that another one starts (`app/` makes `app/a/` redundant), sorted."""
    kept: list[str] = []
    for prefix in sorted(set(prefixes)):  # a prefix sorts before every string it starts
        if not kept or not prefix.startswith(kept[-1]):
            kept.append(prefix)
        # else: covered by the last kept one (everything between them in order starts with it too)
    return tuple(kept)


def compile_permissions(principal: str, roles: Iterable[str], descriptors: dict[str, RoleDescriptor]) -> Permissions:
    """The permissions of `roles` (built-in or custom; unknown ones grant nothing)."""
    names = tuple(sorted(set(roles)))
    cluster: set[str] = set()
    granted: dict[str, list[str]] = {}
    for name in names:
        built_in = _BUILT_IN.get(name)
        if built_in is not None:
            cluster |= built_in[0]
            for privilege, prefixes in built_in[1].items():
                granted.setdefault(privilege, []).extend(prefixes)
            continue
        descriptor = descriptors.get(name)
        if descriptor is None:
            continue
        cluster.update(descriptor.cluster)
        for grant in descriptor.keys:
            for privilege in grant.privileges:
                granted.setdefault(privilege, []).extend(grant.prefixes)
    keys = {privilege: minimal_prefixes(prefixes) for privilege, prefixes in granted.items()}
    return Permissions(principal, names, frozenset(cluster), keys)


class MappingIndex:
    """The role mappings of one `SecurityMetadata`, indexed by principal: exact names in a dict, patterns
    (`NAME*`) in a list. Built once per metadata."""

    def __init__(self, security: SecurityMetadata) -> None:
        self.exact: dict[str, set[str]] = {}
        self.patterns: list[tuple[str, tuple[str, ...]]] = []
        for mapping in security.role_mappings.values():
            for principal in mapping.principals:
                if principal.endswith(WILDCARD):
                    self.patterns.append((principal[:-1], mapping.roles))
                else:
                    self.exact.setdefault(principal, set()).update(mapping.roles)

    def roles_of(self, name: str) -> set[str]:
        roles = set(self.exact.get(name, ()))
        for start, mapped in self.patterns:
            if name.startswith(start):
                roles.update(mapped)
        return roles


def effective_roles(principal: Principal, index: MappingIndex) -> set[str]:
    return {*principal.roles, *index.roles_of(principal.name)}


class Authorizer:
    """Permissions by principal, for the newest `SecurityMetadata` it was asked about: a new metadata object (a
    change of roles or mappings) starts the cache afresh. At most `max_cached` principals are kept."""

    def __init__(self, max_cached: int = 4096) -> None:
        self.max_cached = max_cached
        self._security: SecurityMetadata | None = None
        self._index: MappingIndex | None = None
        self._cache: dict[Principal, Permissions] = {}

    def permissions(self, principal: Principal, security: SecurityMetadata | None) -> Permissions:
        security = EMPTY_SECURITY if security is None else security
        if security is not self._security:
            self._security, self._index, self._cache = security, None, {}
        found = self._cache.get(principal)
        if found is not None:
            return found
        if self._index is None:
            self._index = MappingIndex(security)
        found = compile_permissions(principal.name, effective_roles(principal, self._index), security.roles)
        if len(self._cache) >= self.max_cached:
            self._cache.clear()
        self._cache[principal] = found
        return found


# -- what a client request of the core needs (declared by its Action: requests/base.py) --------------------


@dataclass(frozen=True)
class Access:
    """What the requests of one type need of their principal: a cluster privilege, or key accesses and the
    sessions they use (each must be the principal's own); `open`: nothing (a read barrier, which reads no key: a
    node asks for one before it serves a read of its own state, which it checks itself)."""

    cluster: str | None = None
    keys: Callable[[Any], Iterable[KeyAccess]] | None = None
    sessions: Callable[[Any], Iterable[str]] | None = None
    session_privilege: bool = True  # using its sessions needs `session` on their prefixes (not to end one)
    open: bool = False


NEEDS_MANAGE = Access(cluster=MANAGE)  # a request that declares nothing else
OPEN = Access(open=True)
NEEDS_SECURITY = Access(cluster=SECURITY)


@dataclass(frozen=True)
class SessionView:
    """A session as authorization sees it: its owner (None: created without a principal, by anyone who may
    use every key's sessions) and the prefix its creator holds `session` on."""

    owner: str | None
    prefix: str


def session_missing(
    permissions: Permissions, session_id: str, session: SessionView | None, privilege_needed: bool = True
) -> str | None:
    """A session that exists must belong to the principal (or the principal is an admin), and the principal
    must still hold `session` on its prefix (unless `privilege_needed` is False). A session that does not exist
    is not refused here: it answers 404 where it is looked up. None, or what is missing."""
    if session is None or permissions.admin:
        return None
    if session.owner is not None and session.owner != permissions.principal:
        return f"to own session [{session_id}], which another principal created"
    access = KeyAccess(SESSION, session.prefix, prefix=True)
    if privilege_needed and not permissions.allows(access):
        return access.describe()
    return None


def request_missing(
    request: Any, access: Access, permissions: Permissions, session_of: Callable[[str], SessionView | None]
) -> str | None:
    """None when `permissions` allow `request` (whose type needs `access`), else what is missing."""
    if permissions.admin or access.open:
        return None
    if access.cluster is not None:
        return permissions.missing_cluster(access.cluster)
    if access.keys is not None:
        missing = permissions.missing(access.keys(request))
        if missing is not None:
            return missing
    for session_id in access.sessions(request) if access.sessions is not None else ():
        missing = session_missing(permissions, session_id, session_of(session_id), access.session_privilege)
        if missing is not None:
            return missing
    return None


def request_denial(
    request: Any, access: Access, permissions: Permissions, session_of: Callable[[str], SessionView | None]
) -> ClusterError | None:
    """None when `permissions` allow `request`, else the 403 naming what is missing."""
    missing = request_missing(request, access, permissions, session_of)
    if missing is None:
        return None
    return forbidden(permissions.unauthorized(describe_request(request), missing))


def describe_request(request: Any) -> str:
    """The action a refusal names: the request type, with its key or prefix when it has one."""
    name = type(request).__name__
    key = getattr(request, "key", None)
    if isinstance(key, str):
        return f"{name} [{key}]"
    prefix = getattr(request, "prefix", None)
    return f"{name} [{prefix}]" if isinstance(prefix, str) else name


def forbidden(reason: str) -> ClusterError:
    """The error of a refused request: Elasticsearch's 403 `security_exception`."""
    return ClusterError(type=SECURITY_EXCEPTION, reason=reason, status=403)
