"""What a route asks of its caller: one privilege, and the built-in roles that hold it.

A route's declaration (routes.py) names the one privilege it needs; the role a token needs for it follows from
the built-in roles below, so that a route's access rule is written once, in its declaration. The privileges
are Elasticsearch's kinds, for keys instead of indices:

- on keys: `read` (get, range, watch), `write` (put, delete, prefix delete, transactions) and `session`
  (sessions and the keys bound to them); a declaration also says where a request names its keys (`KeysFrom`);
- on the cluster: `monitor` (the node's and the cluster's own views: info, health, state, history, metrics)
  and `manage` (settings, voting exclusions, hooks, snapshots);
- `none`: no token at all (the kubelet's probes).
"""

from __future__ import annotations

import enum


class Role(enum.IntEnum):
    OPEN = 0  # no token needed
    READER = 1
    WRITER = 2
    ADMIN = 3


class Privilege(enum.Enum):
    NONE = "none"
    MONITOR = "monitor"
    READ = "read"
    WRITE = "write"
    SESSION = "session"
    MANAGE = "manage"


# What each built-in role holds; each holds everything the one before it does.
BUILT_IN_ROLES: dict[Role, frozenset[Privilege]] = {
    Role.OPEN: frozenset({Privilege.NONE}),
    Role.READER: frozenset({Privilege.NONE, Privilege.MONITOR, Privilege.READ}),
    Role.WRITER: frozenset({Privilege.NONE, Privilege.MONITOR, Privilege.READ, Privilege.WRITE, Privilege.SESSION}),
    Role.ADMIN: frozenset(Privilege),
}


def role_for(privilege: Privilege) -> Role:
    """The lowest built-in role that holds `privilege`."""
    return min(role for role, held in BUILT_IN_ROLES.items() if privilege in held)
