"""`spec.access`: who may do what in the cluster, as the operator applies it through the sidecars' API.

- `serviceAccounts`: whether pods prove who they are with a projected ServiceAccount token (the sidecars' realm
  `kubernetes`; on with tokens), and the audience such a token must carry (default `coordinated.dev/NS/NAME`).
- `roles`: custom roles, each privileges on the keys under prefixes and on the cluster (`PUT /_security/role`).
- `roleMappings`: roles given to principals (`PUT /_security/role_mapping`): ServiceAccounts of any namespace
  (`serviceAccounts: [{namespace, name}]`, no name: every ServiceAccount of the namespace), and other
  principals by name (tokens-file names, certificate subjects; a name may end in `*`).
- `quotas`: limits under a prefix (`PUT /_quota`).

Pure data: parsed from the resource, validated with the same rules the sidecar applies (so a mistake is named in
the status before anything is sent), and turned into the API's bodies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from coordinated.coordination.security import (
    BUILT_IN_ROLES,
    NO_ROLE,
    KeyGrant,
    Quota,
    RoleDescriptor,
    RoleMapping,
    describe_problem,
    mapping_problem,
    name_problem,
    quota_problem,
    role_problem,
)

SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
# spec.access.quotas[*] field -> the API's limit.
QUOTA_FIELDS = {
    "maxKeys": "max_keys",
    "maxBytes": "max_bytes",
    "maxSessions": "max_sessions",
    "maxWatchStreams": "max_watch_streams",
    "maxWritesPerSecond": "max_writes_per_second",
}


@dataclass(frozen=True)
class ServiceAccountsSpec:
    enabled: bool = True
    audience: str | None = None  # None: coordinated.dev/NAMESPACE/NAME


@dataclass(frozen=True)
class AccessRole:
    name: str
    role: RoleDescriptor


@dataclass(frozen=True)
class AccessRoleMapping:
    name: str
    mapping: RoleMapping  # ServiceAccount subjects already written as principals


@dataclass(frozen=True)
class AccessQuota:
    name: str
    quota: Quota
    force: bool = False  # limits below the current usage stop only the growth


@dataclass(frozen=True)
class AccessSpec:
    service_accounts: ServiceAccountsSpec = ServiceAccountsSpec()
    roles: tuple[AccessRole, ...] = ()
    role_mappings: tuple[AccessRoleMapping, ...] = ()
    quotas: tuple[AccessQuota, ...] = ()
    problems: tuple[str, ...] = field(default=(), compare=False)  # what could not be parsed

    @property
    def lists_anything(self) -> bool:
        return bool(self.roles or self.role_mappings or self.quotas)

    @classmethod
    def from_resource(cls, body: Mapping[str, Any] | None) -> AccessSpec:
        body = body or {}
        accounts = body.get("serviceAccounts") or {}
        problems: list[str] = []
        roles = tuple(_role(entry) for entry in body.get("roles") or ())
        mappings = tuple(_mapping(entry, problems) for entry in body.get("roleMappings") or ())
        quotas = tuple(_quota(entry, problems) for entry in body.get("quotas") or ())
        return cls(
            service_accounts=ServiceAccountsSpec(
                enabled=bool(accounts.get("enabled", True)), audience=accounts.get("audience") or None
            ),
            roles=roles,
            role_mappings=mappings,
            quotas=quotas,
            problems=tuple(problems),
        )

    def validate(self) -> list[str]:
        """Every problem of the lists, each naming the entry and the field; empty when the sidecars would take
        them all."""
        found = list(self.problems)
        for what, names in (
            ("role", [role.name for role in self.roles]),
            ("role mapping", [mapping.name for mapping in self.role_mappings]),
            ("quota", [quota.name for quota in self.quotas]),
        ):
            for name in sorted({name for name in names if names.count(name) > 1}):
                found.append(f"spec.access: {what} [{name}] is listed twice")
        for role in self.roles:
            if role.name in BUILT_IN_ROLES or role.name == NO_ROLE:
                found.append(f"spec.access.roles: role [{role.name}] is built in and cannot be defined")
            elif (problem := name_problem(role.name, "role")) is not None:
                found.append(f"spec.access.roles: {problem}")
            elif (issue := role_problem(role.role)) is not None:
                found.append(f"spec.access.roles[{role.name}]: {describe_problem(issue)}")
        for mapping in self.role_mappings:
            if (problem := name_problem(mapping.name, "role mapping")) is not None:
                found.append(f"spec.access.roleMappings: {problem}")
            elif (issue := mapping_problem(mapping.mapping)) is not None:
                found.append(f"spec.access.roleMappings[{mapping.name}]: {describe_problem(issue)}")
        for quota in self.quotas:
            if (problem := name_problem(quota.name, "quota")) is not None:
                found.append(f"spec.access.quotas: {problem}")
            elif not quota.quota.limits():
                found.append(
                    f"spec.access.quotas[{quota.name}]: a quota sets at least one of {', '.join(QUOTA_FIELDS)}"
                )
            elif (issue := quota_problem(quota.quota)) is not None:
                found.append(f"spec.access.quotas[{quota.name}]: {describe_problem(issue)}")
        return found


def _strings(values: object) -> tuple[str, ...]:
    return tuple(str(value) for value in values) if isinstance(values, Sequence) and not isinstance(values, str) else ()


def _role(entry: Mapping[str, Any]) -> AccessRole:
    grants = tuple(
        KeyGrant(_strings(grant.get("prefixes")), _strings(grant.get("privileges")))
        for grant in entry.get("keys") or ()
    )
    return AccessRole(str(entry.get("name", "")), RoleDescriptor(grants, _strings(entry.get("cluster"))))


def service_account_principal(namespace: str, name: str | None) -> str:
    """`system:serviceaccount:NS:NAME`; without a name (or `*`), every ServiceAccount of the namespace."""
    return f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name if name and name != '*' else '*'}"


def _mapping(entry: Mapping[str, Any], problems: list[str]) -> AccessRoleMapping:
    name = str(entry.get("name", ""))
    principals = list(_strings(entry.get("principals")))
    for account in entry.get("serviceAccounts") or ():
        namespace = str(account.get("namespace") or "")
        if not namespace:
            problems.append(f"spec.access.roleMappings[{name}]: a serviceAccounts entry names no namespace")
            continue
        principals.append(service_account_principal(namespace, account.get("name")))
    return AccessRoleMapping(name, RoleMapping(_strings(entry.get("roles")), tuple(principals)))


def _quota(entry: Mapping[str, Any], problems: list[str]) -> AccessQuota:
    name = str(entry.get("name", ""))
    limits: dict[str, int] = {}
    for key, limit in QUOTA_FIELDS.items():
        value = entry.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            problems.append(f"spec.access.quotas[{name}]: [{key}] must be a whole number of at least 0")
            continue
        limits[limit] = value
    quota = Quota(prefix=str(entry.get("prefix", "")), **limits)
    return AccessQuota(name, quota, bool(entry.get("force", False)))


# -- the API's bodies, and whether what a sidecar answers is already what the spec asks ----------------------


def role_grants(role: RoleDescriptor) -> dict[str, list[str]]:
    """The privileges by prefix, as the client's `put_role` takes them (a prefix in two grants: their union)."""
    grants: dict[str, set[str]] = {}
    for grant in role.keys:
        for prefix in grant.prefixes:
            grants.setdefault(prefix, set()).update(grant.privileges)
    return {prefix: sorted(privileges) for prefix, privileges in grants.items()}


def _grant_pairs(keys: Sequence[Mapping[str, Any]]) -> frozenset[tuple[str, str]]:
    return frozenset(
        (str(prefix), str(privilege))
        for grant in keys
        for prefix in grant.get("prefixes") or ()
        for privilege in grant.get("privileges") or ()
    )


def role_matches(role: RoleDescriptor, answer: Mapping[str, Any] | None) -> bool:
    """Whether `GET /_security/role/NAME`'s answer grants exactly what `role` does."""
    if answer is None:
        return False
    wanted = frozenset(
        (prefix, privilege) for prefix, privileges in role_grants(role).items() for privilege in privileges
    )
    return _grant_pairs(answer.get("keys") or ()) == wanted and set(answer.get("cluster") or ()) == set(role.cluster)


def mapping_matches(mapping: RoleMapping, answer: Mapping[str, Any] | None) -> bool:
    if answer is None:
        return False
    return set(answer.get("roles") or ()) == set(mapping.roles) and set(answer.get("principals") or ()) == set(
        mapping.principals
    )


def quota_matches(quota: Quota, answer: Mapping[str, Any] | None) -> bool:
    if answer is None or answer.get("prefix") != quota.prefix:
        return False
    return {key: answer.get(key) for key in QUOTA_FIELDS.values()} == {
        key: getattr(quota, key) for key in QUOTA_FIELDS.values()
    }
