"""Access control's part of the cluster state, in Elasticsearch's security API terms for keys instead of indices:
custom roles, role mappings and quotas per key prefix; and the principal a client request is made as.

- A **principal** is who a request is authenticated as: a token of the tokens file (`ROLE TOKEN [NAME]`), a
  client certificate's subject, or a Kubernetes ServiceAccount (`system:serviceaccount:NS:NAME`). It carries
  the roles its realm gives it (a tokens-file line's role; none for the others); role mappings add more.
- A **role** grants privileges on keys under prefixes (`read`: get, range, watch; `write`: put, delete, prefix
  delete, transactions; `session`: create and use sessions, ephemeral keys) and privileges on the cluster
  (`monitor`: the cluster's and the node's own views; `manage`: settings, voting exclusions, hooks,
  snapshots). `admin`, `writer` and `reader` are built in and cannot be redefined.
- A **role mapping** gives its roles to the principals it names (exact names, or a name ending in `*` for every
  principal whose name starts with what comes before it).
- A **quota** limits what is stored and done under a prefix: keys, bytes, sessions, watch streams and writes
  per second.

They travel in the cluster state as one small field (`ClusterState.security`), sent whole in a diff when it
changes, as Elasticsearch keeps its role mappings in the cluster state. Pure data and validation.
"""

from __future__ import annotations

import re
from typing import Annotated

import msgspec

from coordinated.coordination.counters import LONG_MAX
from coordinated.key_names import prefix_problem

Long = Annotated[int, msgspec.Meta(ge=0, le=LONG_MAX)]

# The privileges a role may grant, in the order the docs list them.
KEY_PRIVILEGES = ("read", "write", "session")
CLUSTER_PRIVILEGES = ("monitor", "manage")
# Built in, as Elasticsearch's reserved roles: never stored, never redefined or deleted.
ADMIN, WRITER, READER = "admin", "writer", "reader"
BUILT_IN_ROLES = (ADMIN, WRITER, READER)
# A tokens-file line whose principal gets its roles from role mappings only.
NO_ROLE = "none"

# Realms: where a principal was authenticated.
REALM_FILE = "file"  # a token of `http.auth.tokens_file`
REALM_CERTIFICATE = "certificate"  # a client certificate's subject (`http.ssl.client_authentication`)
REALM_KUBERNETES = "kubernetes"  # a Kubernetes ServiceAccount token

# Names of roles, role mappings and quotas: as Elasticsearch's role names, without a leading `_` (reserved).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}")
MAX_PRINCIPAL_LENGTH = 512
MAX_ROLES = 1_000  # custom roles in the cluster
MAX_ROLE_MAPPINGS = 10_000
MAX_QUOTAS = 1_000
MAX_GRANTS = 100  # key grants per role; prefixes per grant; roles and principals per mapping
WILDCARD = "*"


class KeyGrant(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`privileges` on every key under any of `prefixes` (`""`: every key)."""

    prefixes: tuple[str, ...]
    privileges: tuple[str, ...]


class RoleDescriptor(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """`PUT /_security/role/NAME`: `{"keys": [{"prefixes": [...], "privileges": [...]}], "cluster": [...]}`."""

    keys: tuple[KeyGrant, ...] = ()
    cluster: tuple[str, ...] = ()


class RoleMapping(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`PUT /_security/role_mapping/NAME`: `{"roles": [...], "principals": [...]}`."""

    roles: tuple[str, ...]
    principals: tuple[str, ...]


class Quota(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """`PUT /_quota/NAME`: limits on what is under `prefix`; a limit left out is not limited."""

    prefix: str
    max_keys: Long | None = None
    max_bytes: Long | None = None
    max_sessions: Long | None = None
    max_watch_streams: Long | None = None
    max_writes_per_second: Long | None = None

    def limits(self) -> dict[str, int]:
        """The limits that are set, by name."""
        return {name: value for name in QUOTA_LIMITS if (value := getattr(self, name)) is not None}


QUOTA_LIMITS = ("max_keys", "max_bytes", "max_sessions", "max_watch_streams", "max_writes_per_second")


class SecurityMetadata(msgspec.Struct, frozen=True, omit_defaults=True):
    """The custom roles, role mappings and quotas, by name."""

    roles: dict[str, RoleDescriptor] = {}
    role_mappings: dict[str, RoleMapping] = {}
    quotas: dict[str, Quota] = {}


EMPTY_SECURITY = SecurityMetadata()


# -- validation: each returns None, or (the field, the reason) of a 400 -----------------------------------------

Problem = tuple[str, str] | None


def name_problem(name: str, what: str) -> str | None:
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        return (
            f"invalid {what} name [{name}]: 1 to 128 letters, digits, '_', '.', ':', '@' or '-', starting with a "
            "letter or digit"
        )
    return None


def role_name_problem(name: str) -> str | None:
    if name in BUILT_IN_ROLES or name == NO_ROLE:
        return f"role [{name}] is built in: it cannot be defined, changed or deleted"
    return name_problem(name, "role")


def _prefix_field_problem(prefix: str, field: str) -> Problem:
    problem = prefix_problem(prefix)
    return None if problem is None else (field, f"invalid prefix: {problem}")


def role_problem(role: RoleDescriptor) -> Problem:
    """A role's privileges and prefixes: every privilege known, every prefix one that can start a key."""
    if len(role.keys) > MAX_GRANTS:
        return ("keys", f"a role has at most {MAX_GRANTS} key grants, got {len(role.keys)}")
    for index, grant in enumerate(role.keys):
        field = f"keys[{index}]"
        if not grant.prefixes:
            return (f"{field}.prefixes", 'a key grant names at least one prefix (`""` for every key)')
        if not grant.privileges:
            return (f"{field}.privileges", "a key grant names at least one privilege: " + ", ".join(KEY_PRIVILEGES))
        if len(grant.prefixes) > MAX_GRANTS:
            return (f"{field}.prefixes", f"a key grant has at most {MAX_GRANTS} prefixes")
        for number, prefix in enumerate(grant.prefixes):
            problem = _prefix_field_problem(prefix, f"{field}.prefixes[{number}]")
            if problem is not None:
                return problem
        for number, privilege in enumerate(grant.privileges):
            if privilege not in KEY_PRIVILEGES:
                return (
                    f"{field}.privileges[{number}]",
                    f"unknown privilege [{privilege}]: a key privilege is one of " + ", ".join(KEY_PRIVILEGES),
                )
    for number, privilege in enumerate(role.cluster):
        if privilege not in CLUSTER_PRIVILEGES:
            return (
                f"cluster[{number}]",
                f"unknown privilege [{privilege}]: a cluster privilege is one of " + ", ".join(CLUSTER_PRIVILEGES),
            )
    return None


def principal_pattern_problem(pattern: str) -> str | None:
    """A mapping's principal: a name, or a name's start followed by `*` (one `*`, at the end)."""
    if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_PRINCIPAL_LENGTH:
        return f"a principal is 1 to {MAX_PRINCIPAL_LENGTH} characters"
    if not pattern.isprintable():
        return f"principal [{pattern!r}] has a character that is not printable"
    if WILDCARD in pattern[:-1]:
        return f"principal [{pattern}] has [{WILDCARD}] other than at its end"
    return None


def mapping_problem(mapping: RoleMapping) -> Problem:
    if not mapping.roles:
        return ("roles", "a role mapping gives at least one role")
    if not mapping.principals:
        return ("principals", "a role mapping names at least one principal")
    for field, values in (("roles", mapping.roles), ("principals", mapping.principals)):
        if len(values) > MAX_GRANTS:
            return (field, f"a role mapping has at most {MAX_GRANTS} {field}")
    for number, role in enumerate(mapping.roles):
        if role not in BUILT_IN_ROLES:
            problem = name_problem(role, "role")
            if problem is not None:
                return (f"roles[{number}]", problem)
    for number, principal in enumerate(mapping.principals):
        problem = principal_pattern_problem(principal)
        if problem is not None:
            return (f"principals[{number}]", problem)
    return None


def quota_problem(quota: Quota) -> Problem:
    problem = _prefix_field_problem(quota.prefix, "prefix")
    if problem is not None:
        return problem
    if not quota.limits():
        return ("max_keys", "a quota sets at least one limit: " + ", ".join(QUOTA_LIMITS))
    return None


def describe_problem(problem: tuple[str, str]) -> str:
    field, reason = problem
    return f"[{field}]: {reason}"


def principal_matches(pattern: str, name: str) -> bool:
    """Whether a mapping's principal names `name`: equal, or `name` starts with what precedes a final `*`."""
    if pattern.endswith(WILDCARD):
        return name.startswith(pattern[:-1])
    return pattern == name
