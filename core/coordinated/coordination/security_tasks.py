"""What the master does with the requests that change roles, role mappings and quotas: their checks, and their
changes to the `SecurityMetadata` a batch builds (one after the other, so that two concurrent changes are decided
in order: two deletes of the last two admin mappings cannot both succeed).

A change takes effect with the publication that carries it. Its answer waits until every node of the cluster has
applied it (`Committed.acknowledged`, client_requests.py), so that once a revocation is acknowledged no node
serves the principal by the old rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

import msgspec

from coordinated.coordination import client
from coordinated.coordination.client import (
    ClientRequest,
    ClientResult,
    Committed,
    DeleteQuota,
    DeleteRole,
    DeleteRoleMapping,
    PutQuota,
    PutRole,
    PutRoleMapping,
)
from coordinated.coordination.quotas import BatchQuotas, Usage, below_usage_problem, usage_under
from coordinated.coordination.security import (
    ADMIN,
    MAX_QUOTAS,
    MAX_ROLE_MAPPINGS,
    MAX_ROLES,
    SecurityMetadata,
    describe_problem,
    mapping_problem,
    name_problem,
    quota_problem,
    role_name_problem,
    role_problem,
)
from coordinated.coordination.state import Session

FEATURE_NOT_AVAILABLE = "feature_not_available_exception"


class SecurityDraft(Protocol):
    """What the security executors change in a batch's draft."""

    security: SecurityMetadata | None
    quotas: BatchQuotas | None

    def keys_under(self, prefix: str) -> Iterable[tuple[str, Any]]: ...

    def sessions(self) -> Iterable[Session]: ...

    def quotas_changed(self, quotas: dict[str, Any], counted: dict[str, Usage]) -> None: ...


def security_request_problem(request: ClientRequest) -> str | None:
    """The checks of a security request's names and body: None, or the reason of a 400 naming the field."""
    if isinstance(request, PutRole):
        problem = role_name_problem(request.name)
        if problem is not None:
            return problem
        found = role_problem(request.role)
        return None if found is None else describe_problem(found)
    if isinstance(request, DeleteRole):
        return role_name_problem(request.name)
    if isinstance(request, PutRoleMapping):
        problem = name_problem(request.name, "role mapping")
        if problem is not None:
            return problem
        found = mapping_problem(request.mapping)
        return None if found is None else describe_problem(found)
    if isinstance(request, DeleteRoleMapping):
        return name_problem(request.name, "role mapping")
    if isinstance(request, PutQuota):
        problem = name_problem(request.name, "quota")
        if problem is not None:
            return problem
        found = quota_problem(request.quota)
        return None if found is None else describe_problem(found)
    if isinstance(request, DeleteQuota):
        return name_problem(request.name, "quota")
    return None


def access_control_off() -> client.ClusterError:
    reason = (
        "access control (roles, role mappings and quotas) is not on yet: not every node of the cluster runs a "
        "release that has it"
    )
    return client.ClusterError(type=FEATURE_NOT_AVAILABLE, reason=reason, status=400)


def _changed(security: SecurityMetadata, **fields: Any) -> SecurityMetadata:
    return msgspec.structs.replace(security, **fields)


def _has_admin_mapping(mappings: Iterable[Any]) -> bool:
    return any(ADMIN in mapping.roles for mapping in mappings)


def _leaves_no_admin(file_admins: bool, before: dict[str, Any], after: dict[str, Any]) -> bool:
    """A change that takes the last `admin` mapping away, from a node whose tokens file names no admin."""
    return not file_admins and _has_admin_mapping(before.values()) and not _has_admin_mapping(after.values())


def _no_admin_left(name: str) -> client.ClusterError:
    return client.bad_request(
        f"this change of role mapping [{name}] would leave the cluster with no admin: no role mapping would give "
        "the [admin] role and the tokens file of the node that took the request names no admin; map another "
        "principal to [admin] first"
    )


def put_role(request: PutRole, draft: SecurityDraft) -> ClientResult | None:
    security = draft.security
    if security is None:
        return access_control_off()
    created = request.name not in security.roles
    if created and len(security.roles) >= MAX_ROLES:
        return client.bad_request(f"cannot define more than [{MAX_ROLES}] roles")
    draft.security = _changed(security, roles={**security.roles, request.name: request.role})
    return Committed(0, 0, created=created)


def delete_role(request: DeleteRole, draft: SecurityDraft) -> ClientResult | None:
    security = draft.security
    if security is None:
        return access_control_off()
    if request.name not in security.roles:
        return client.not_found(f"role [{request.name}] not found")
    roles = {name: role for name, role in security.roles.items() if name != request.name}
    draft.security = _changed(security, roles=roles)
    return Committed(0, 0)


def put_role_mapping(request: PutRoleMapping, draft: SecurityDraft) -> ClientResult | None:
    security = draft.security
    if security is None:
        return access_control_off()
    created = request.name not in security.role_mappings
    if created and len(security.role_mappings) >= MAX_ROLE_MAPPINGS:
        return client.bad_request(f"cannot define more than [{MAX_ROLE_MAPPINGS}] role mappings")
    mappings = {**security.role_mappings, request.name: request.mapping}
    if _leaves_no_admin(request.file_admins, security.role_mappings, mappings):
        return _no_admin_left(request.name)
    draft.security = _changed(security, role_mappings=mappings)
    return Committed(0, 0, created=created)


def delete_role_mapping(request: DeleteRoleMapping, draft: SecurityDraft) -> ClientResult | None:
    security = draft.security
    if security is None:
        return access_control_off()
    if request.name not in security.role_mappings:
        return client.not_found(f"role mapping [{request.name}] not found")
    mappings = {name: mapping for name, mapping in security.role_mappings.items() if name != request.name}
    if _leaves_no_admin(request.file_admins, security.role_mappings, mappings):
        return _no_admin_left(request.name)
    draft.security = _changed(security, role_mappings=mappings)
    return Committed(0, 0)


def put_quota(request: PutQuota, draft: SecurityDraft) -> ClientResult | None:
    security = draft.security
    if security is None:
        return access_control_off()
    created = request.name not in security.quotas
    if created and len(security.quotas) >= MAX_QUOTAS:
        return client.bad_request(f"cannot define more than [{MAX_QUOTAS}] quotas")
    quota = request.quota
    usage = usage_under(quota.prefix, draft.keys_under(quota.prefix), draft.sessions())
    problem = below_usage_problem(request.name, quota, usage)
    if problem is not None and not request.force:
        return client.bad_request(problem)
    quotas = {**security.quotas, request.name: quota}
    draft.security = _changed(security, quotas=quotas)
    draft.quotas_changed(quotas, {request.name: usage})
    return Committed(0, 0, created=created)


def delete_quota(request: DeleteQuota, draft: SecurityDraft) -> ClientResult | None:
    security = draft.security
    if security is None:
        return access_control_off()
    if request.name not in security.quotas:
        return client.not_found(f"quota [{request.name}] not found")
    quotas = {name: quota for name, quota in security.quotas.items() if name != request.name}
    draft.security = _changed(security, quotas=quotas)
    draft.quotas_changed(quotas, {})
    return Committed(0, 0)


SECURITY_EXECUTORS: dict[type, Callable[[Any, Any], ClientResult | None]] = {
    PutRole: put_role,
    DeleteRole: delete_role,
    PutRoleMapping: put_role_mapping,
    DeleteRoleMapping: delete_role_mapping,
    PutQuota: put_quota,
    DeleteQuota: delete_quota,
}
