"""What a route asks of its caller: one privilege, and the built-in roles that hold it.

A route's declaration (routes.py) names the one privilege it needs; the access check (access.py) asks the
caller's permissions for it (coordination/authorization.py), and the role a token of the old kind needs for it
follows from the built-in roles below, so that a route's access rule is written once, in its declaration. The
privileges are Elasticsearch's kinds, for keys instead of indices:

- on keys: `read` (get, range, watch), `write` (put, delete, prefix delete, transactions) and `session`
  (sessions and the keys bound to them); a declaration also says where a request names its keys (`KeysFrom`);
- on the cluster: `monitor` (the node's and the cluster's own views: info, health, state, history, metrics),
  `manage` (settings, voting exclusions, hooks, snapshots) and `security` (roles, role mappings and quotas:
  the built-in `admin` role's alone);
- `authenticated`: any principal, whatever its roles (who am I);
- `none`: no credentials at all (the kubelet's probes).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from coordinated.coordination.authorization import KeyAccess, Permissions


class Role(enum.IntEnum):
    OPEN = 0  # no token needed
    READER = 1
    WRITER = 2
    ADMIN = 3


class Privilege(enum.Enum):
    NONE = "none"
    AUTHENTICATED = "authenticated"
    MONITOR = "monitor"
    READ = "read"
    WRITE = "write"
    SESSION = "session"
    MANAGE = "manage"
    SECURITY = "security"


KEY_PRIVILEGES = frozenset({Privilege.READ, Privilege.WRITE, Privilege.SESSION})
CLUSTER_PRIVILEGES = frozenset({Privilege.MONITOR, Privilege.MANAGE, Privilege.SECURITY})

# What each built-in role holds; each holds everything the one before it does.
BUILT_IN_ROLES: dict[Role, frozenset[Privilege]] = {
    Role.OPEN: frozenset({Privilege.NONE}),
    Role.READER: frozenset({Privilege.NONE, Privilege.AUTHENTICATED, Privilege.MONITOR, Privilege.READ}),
    Role.WRITER: frozenset(
        {Privilege.NONE, Privilege.AUTHENTICATED, Privilege.MONITOR, Privilege.READ, Privilege.WRITE, Privilege.SESSION}
    ),
    Role.ADMIN: frozenset(Privilege),
}


def role_for(privilege: Privilege) -> Role:
    """The lowest built-in role that holds `privilege`."""
    return min(role for role, held in BUILT_IN_ROLES.items() if privilege in held)


def missing_privilege(
    privilege: Privilege, targets: Iterable[tuple[str, bool]] | None, permissions: Permissions
) -> str | None:
    """What `permissions` lack for a route's `privilege` over the keys its request names (`targets`: each a key
    or a prefix, and whether it is a prefix; None: the keys of a body, which the handler checks once it has
    decoded it). None when nothing is lacking, or when the handler checks the rest (a session's owner and
    prefix: here, only whether the principal may use sessions at all)."""
    if privilege in (Privilege.NONE, Privilege.AUTHENTICATED):
        return None
    if privilege in CLUSTER_PRIVILEGES:
        return permissions.missing_cluster(privilege.value)
    if privilege is Privilege.SESSION:
        return None if permissions.granted_prefixes(privilege.value) else f"[{privilege.value}] on some keys"
    if targets is None:
        return None
    return permissions.missing(KeyAccess(privilege.value, name, prefix) for name, prefix in targets)
