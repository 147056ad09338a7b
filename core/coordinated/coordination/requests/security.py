"""The requests that change roles, role mappings and quotas (`/_security/role`, `/_security/role_mapping`,
`/_quota`), each with what the core does with it (base.Action): their checks, and their changes to the
`SecurityMetadata` a batch builds, one after the other, so that two concurrent changes are decided in order (two
deletes of the last two admin mappings cannot both succeed).

A change takes effect with the publication that carries it. Its answer waits until every node of the cluster has
applied it (`Committed.acknowledged`, applied_waits.py), so that once a revocation is acknowledged no node serves
the principal by the old rules. They all need the `security` privilege (the built-in `admin` role's).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from coordinated.coordination import client
from coordinated.coordination.authorization import NEEDS_SECURITY
from coordinated.coordination.batch_draft import Draft, Result
from coordinated.coordination.client import ClientRequest, Committed
from coordinated.coordination.master_service import Priority
from coordinated.coordination.quotas import below_usage_problem, usage_under
from coordinated.coordination.requests.base import Action, Master, Reply, Runs
from coordinated.coordination.security import (
    ADMIN,
    MAX_QUOTAS,
    MAX_ROLE_MAPPINGS,
    MAX_ROLES,
    Quota,
    RoleDescriptor,
    RoleMapping,
    SecurityMetadata,
    describe_problem,
    mapping_problem,
    name_problem,
    quota_problem,
    role_name_problem,
    role_problem,
)
from coordinated.coordination.wire_versions import ACCESS_CONTROL

FEATURE_NOT_AVAILABLE = "feature_not_available_exception"


class PutRole(ClientRequest[Committed], frozen=True, tag="put_role"):
    """Define or replace a custom role (`PUT /_security/role/NAME`)."""

    name: str
    role: RoleDescriptor


class DeleteRole(ClientRequest[Committed], frozen=True, tag="delete_role"):
    name: str


class PutRoleMapping(ClientRequest[Committed], frozen=True, tag="put_role_mapping"):
    """Define or replace a role mapping. `file_admins`: the node it came through has admins in its tokens file
    (who stay admins whatever the mappings say), so the change cannot leave the cluster without an admin."""

    name: str
    mapping: RoleMapping
    file_admins: bool = False


class DeleteRoleMapping(ClientRequest[Committed], frozen=True, tag="delete_role_mapping"):
    name: str
    file_admins: bool = False


class PutQuota(ClientRequest[Committed], frozen=True, tag="put_quota"):
    """Define or replace a quota; one whose limits are below what is used now needs `force`."""

    name: str
    quota: Quota
    force: bool = False


class DeleteQuota(ClientRequest[Committed], frozen=True, tag="delete_quota"):
    name: str


def _described(problem: tuple[str, str] | None) -> str | None:
    return None if problem is None else describe_problem(problem)


def access_control_off() -> client.ClusterError:
    reason = (
        "access control (roles, role mappings and quotas) is not on yet: not every node of the cluster runs a "
        "release that has it"
    )
    return client.ClusterError(type=FEATURE_NOT_AVAILABLE, reason=reason, status=400)


def _changed(security: SecurityMetadata, **fields: Any) -> SecurityMetadata:
    return msgspec.structs.replace(security, **fields)


def _has_admin_mapping(mappings: Iterable[RoleMapping]) -> bool:
    return any(ADMIN in mapping.roles for mapping in mappings)


def _leaves_no_admin(file_admins: bool, before: dict[str, RoleMapping], after: dict[str, RoleMapping]) -> bool:
    """A change that takes the last `admin` mapping away, from a node whose tokens file names no admin."""
    return not file_admins and _has_admin_mapping(before.values()) and not _has_admin_mapping(after.values())


def _no_admin_left(name: str) -> client.ClusterError:
    return client.bad_request(
        f"this change of role mapping [{name}] would leave the cluster with no admin: no role mapping would give "
        "the [admin] role and the tokens file of the node that took the request names no admin; map another "
        "principal to [admin] first"
    )


def _put_role(request: PutRole, draft: Draft) -> Result:
    security = draft.security
    if security is None:
        return access_control_off()
    created = request.name not in security.roles
    if created and len(security.roles) >= MAX_ROLES:
        return client.bad_request(f"cannot define more than [{MAX_ROLES}] roles")
    draft.security = _changed(security, roles={**security.roles, request.name: request.role})
    return Committed(0, 0, created=created)


def _delete_role(request: DeleteRole, draft: Draft) -> Result:
    security = draft.security
    if security is None:
        return access_control_off()
    if request.name not in security.roles:
        return client.not_found(f"role [{request.name}] not found")
    roles = {name: role for name, role in security.roles.items() if name != request.name}
    draft.security = _changed(security, roles=roles)
    return Committed(0, 0)


def _put_role_mapping(request: PutRoleMapping, draft: Draft) -> Result:
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


def _delete_role_mapping(request: DeleteRoleMapping, draft: Draft) -> Result:
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


def _put_quota(request: PutQuota, draft: Draft) -> Result:
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


def _delete_quota(request: DeleteQuota, draft: Draft) -> Result:
    security = draft.security
    if security is None:
        return access_control_off()
    if request.name not in security.quotas:
        return client.not_found(f"quota [{request.name}] not found")
    quotas = {name: quota for name, quota in security.quotas.items() if name != request.name}
    draft.security = _changed(security, quotas=quotas)
    draft.quotas_changed(quotas, {})
    return Committed(0, 0)


def _acknowledged(request: ClientRequest[Any], reply: Reply, deadline: int, master: Master) -> None:
    """The change's task, answered once every node has applied it (or at the deadline, not acknowledged)."""
    master.run(request, lambda result: master.until_applied(result, reply, deadline), deadline)


def _action(request: type[Any], execute: Any, validate: Any) -> Action[Any]:
    return Action(
        request,
        Runs.MASTER,
        validate=lambda request, state, settings: validate(request),
        priority=Priority.HIGH,
        execute=execute,
        on_master=_acknowledged,
        describe=lambda request: f"{type(request).__name__} [{request.name}]",
        access=NEEDS_SECURITY,
        feature=ACCESS_CONTROL.name,  # a master of an older release cannot decode it
    )


PUT_ROLE = _action(PutRole, _put_role, lambda r: role_name_problem(r.name) or _described(role_problem(r.role)))
DELETE_ROLE = _action(DeleteRole, _delete_role, lambda r: role_name_problem(r.name))
PUT_ROLE_MAPPING = _action(
    PutRoleMapping,
    _put_role_mapping,
    lambda r: name_problem(r.name, "role mapping") or _described(mapping_problem(r.mapping)),
)
DELETE_ROLE_MAPPING = _action(DeleteRoleMapping, _delete_role_mapping, lambda r: name_problem(r.name, "role mapping"))
PUT_QUOTA = _action(PutQuota, _put_quota, lambda r: name_problem(r.name, "quota") or _described(quota_problem(r.quota)))
DELETE_QUOTA = _action(DeleteQuota, _delete_quota, lambda r: name_problem(r.name, "quota"))

ACTIONS: tuple[Action[Any], ...] = (
    PUT_ROLE,
    DELETE_ROLE,
    PUT_ROLE_MAPPING,
    DELETE_ROLE_MAPPING,
    PUT_QUOTA,
    DELETE_QUOTA,
)
