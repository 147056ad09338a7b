"""Access control's API, with Elasticsearch's names: who am I (`/_security/_authenticate`), custom roles
(`/_security/role`) and role mappings (`/_security/role_mapping`).

Roles and mappings live in the cluster state. A change answers once every node has applied it
(`acknowledged: true`; false if one had not by the timeout, though the change is committed), and needs the
`security` privilege (the built-in `admin` role's). Until every node of the cluster runs a release with access
control, a change is refused at once (400 `feature_not_available_exception`).
"""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web

from coordinated.coordination.authorization import READ, Permissions
from coordinated.coordination.client import ClusterError, Committed
from coordinated.coordination.requests.security import DeleteRole, DeleteRoleMapping, PutRole, PutRoleMapping
from coordinated.coordination.security import (
    ADMIN,
    KEY_PRIVILEGES,
    READER,
    WRITER,
    RoleDescriptor,
    RoleMapping,
    SecurityMetadata,
    describe_problem,
    mapping_problem,
    name_problem,
    role_name_problem,
    role_problem,
)
from coordinated.sidecar.node import Node
from coordinated.sidecar.web import api_types as t
from coordinated.sidecar.web.access import permissions_of, principal_of
from coordinated.sidecar.web.app_keys import node_of
from coordinated.sidecar.web.errors import BadRequest, FeatureNotAvailable, error_response, result_error
from coordinated.sidecar.web.inputs import decode_body, no_body, param_bool, read_json, timeout_of
from coordinated.sidecar.web.privileges import Privilege
from coordinated.sidecar.web.reads import consistent_read
from coordinated.sidecar.web.routes import LOCAL, TIMEOUTS, WRITE_ERRORS, Query, Route, Routes

routes = Routes()
CHANGE_ERRORS = (*WRITE_ERRORS, 404)

# How the built-in roles show in `GET /_security/role`.
_BUILT_IN_ANSWERS = {
    ADMIN: t.RoleAnswer([t.KeyGrantAnswer([""], list(KEY_PRIVILEGES))], ["monitor", "manage", "security"], True),
    WRITER: t.RoleAnswer([t.KeyGrantAnswer([""], list(KEY_PRIVILEGES))], ["monitor"], True),
    READER: t.RoleAnswer([t.KeyGrantAnswer([""], [READ])], ["monitor"], True),
}


def security_of(node: Node) -> SecurityMetadata:
    """The roles, mappings and quotas of this node's applied state; FeatureNotAvailable while access control is
    not on (not every node has it: a change must then never reach a master that cannot decode it)."""
    security = node.keys.applied_state.security_metadata()
    if security is None:
        raise FeatureNotAvailable(f"roles, role mappings and quotas need access control: {node.access_control_off()}")
    return security


def checked_name(request: web.Request, param: str, problem: str | None) -> str:
    if problem is not None:
        raise BadRequest(problem)
    return request.match_info[param]


def file_admins(node: Node) -> bool:
    """Whether this node's tokens file names an admin (who stays one whatever the mappings say)."""
    return node.authentication is not None and bool(node.authentication.file_admins())


def changed(result: Committed | ClusterError, kind: str) -> web.Response:
    if isinstance(result, ClusterError):
        return result_error(result)
    return web.json_response(
        {
            kind: {"created": result.created is True},
            "acknowledged": result.acknowledged is True,
            "version": result.version,
        }
    )


def deleted(result: Committed | ClusterError) -> web.Response:
    if isinstance(result, ClusterError):
        return result_error(result)
    return web.json_response({"found": True, "acknowledged": result.acknowledged is True, "version": result.version})


async def read_problem(request: web.Request, params: Query) -> web.Response | None:
    """None once this node's applied state holds every change acknowledged before the request (at once with
    `local`), else the error to answer with. For the routes that declare `local` and the timeouts."""
    return await consistent_read(node_of(request), param_bool(params, "local", False), timeout_of(params))


# -- who am I ---------------------------------------------------------------------------------------------


def authenticate_answer(permissions: Permissions | None, realm: str | None) -> dict[str, Any]:
    if permissions is None:
        return {"principal": None, "realm": None, "roles": [ADMIN], "admin": True}
    roles = sorted(permissions.roles)
    return {"principal": permissions.principal, "realm": realm, "roles": roles, "admin": permissions.admin}


@routes.add(
    Route(
        "GET",
        "/_security/_authenticate",
        "Who the caller is: its principal, realm and roles.",
        Privilege.AUTHENTICATED,
        t.AuthenticateAnswer,
        errors=(),
        description="Any authenticated caller may ask, whatever its roles. `roles` are its realm's (a tokens-file "
        "line's role) and those of every role mapping that names it, by this node's applied state.",
    )
)
async def authenticate(request: web.Request, query: Query) -> web.StreamResponse:
    principal = principal_of(request)
    return web.json_response(authenticate_answer(permissions_of(request), principal.realm if principal else None))


# -- roles ------------------------------------------------------------------------------------------------


def role_answer(role: RoleDescriptor) -> t.RoleAnswer:
    grants = [t.KeyGrantAnswer(list(grant.prefixes), list(grant.privileges)) for grant in role.keys]
    return t.RoleAnswer(grants, list(role.cluster), False)


def roles_answer(security: SecurityMetadata | None, names: list[str] | None) -> dict[str, t.RoleAnswer]:
    custom = {} if security is None else security.roles
    every = {**_BUILT_IN_ANSWERS, **{name: role_answer(role) for name, role in custom.items()}}
    return {name: every[name] for name in sorted(every) if names is None or name in names}


@routes.add(
    Route(
        "GET",
        "/_security/role",
        "Every role: the built-in ones and the custom ones.",
        Privilege.SECURITY,
        dict[str, t.RoleAnswer],
        params=(LOCAL, *TIMEOUTS),
        errors=(400, 503),
    )
)
async def roles_get(request: web.Request, query: Query) -> web.StreamResponse:
    problem = await read_problem(request, query)
    if problem is not None:
        return problem
    node = node_of(request)
    return web.json_response(_encoded(roles_answer(node.keys.applied_state.security_metadata(), None)))


@routes.add(
    Route(
        "GET",
        "/_security/role/{role}",
        "One role, by name.",
        Privilege.SECURITY,
        dict[str, t.RoleAnswer],
        params=(LOCAL, *TIMEOUTS),
        errors=(400, 404, 503),
    )
)
async def role_get(request: web.Request, query: Query) -> web.StreamResponse:
    name = request.match_info["role"]
    problem = await read_problem(request, query)
    if problem is not None:
        return problem
    node = node_of(request)
    found = roles_answer(node.keys.applied_state.security_metadata(), [name])
    if not found:
        return error_response("resource_not_found_exception", f"role [{name}] not found", 404)
    return web.json_response(_encoded(found))


@routes.add(
    Route(
        "PUT",
        "/_security/role/{role}",
        "Define or replace a custom role: privileges on the keys under prefixes, and on the cluster.",
        Privilege.SECURITY,
        t.RoleChanged,
        params=TIMEOUTS,
        body=t.RoleBody,
        errors=CHANGE_ERRORS,
        description='`{"keys": [{"prefixes": ["app/a/"], "privileges": ["read", "write", "session"]}], "cluster": '
        '["monitor"]}`. Key privileges: `read`, `write`, `session`; cluster privileges: `monitor`, `manage`. A '
        "malformed role, an unknown privilege or an invalid prefix gets 400 naming the field.",
    )
)
async def role_put(request: web.Request, query: Query) -> web.StreamResponse:
    name = checked_name(request, "role", role_name_problem(request.match_info["role"]))
    timeout_ms = timeout_of(query)
    role = decode_body(await read_json(request), RoleDescriptor, "role")
    problem = role_problem(role)
    if problem is not None:
        raise BadRequest(f"invalid role: {describe_problem(problem)}")
    node = node_of(request)
    security_of(node)
    return changed(await node.call(PutRole(name, role), timeout_ms), "role")


@routes.add(
    Route(
        "DELETE",
        "/_security/role/{role}",
        "Delete a custom role (the mappings that name it then give nothing by it).",
        Privilege.SECURITY,
        t.Deleted,
        params=TIMEOUTS,
        errors=CHANGE_ERRORS,
    )
)
async def role_delete(request: web.Request, query: Query) -> web.StreamResponse:
    name = checked_name(request, "role", role_name_problem(request.match_info["role"]))
    timeout_ms = timeout_of(query)
    await no_body(request)
    node = node_of(request)
    security_of(node)
    return deleted(await node.call(DeleteRole(name), timeout_ms))


# -- role mappings ----------------------------------------------------------------------------------------


def mappings_answer(security: SecurityMetadata | None, name: str | None) -> dict[str, t.RoleMappingAnswer]:
    mappings = {} if security is None else security.role_mappings
    return {
        key: t.RoleMappingAnswer(list(mapping.roles), list(mapping.principals))
        for key, mapping in sorted(mappings.items())
        if name is None or key == name
    }


@routes.add(
    Route(
        "GET",
        "/_security/role_mapping",
        "Every role mapping.",
        Privilege.SECURITY,
        dict[str, t.RoleMappingAnswer],
        params=(LOCAL, *TIMEOUTS),
        errors=(400, 503),
    )
)
async def mappings_get(request: web.Request, query: Query) -> web.StreamResponse:
    problem = await read_problem(request, query)
    if problem is not None:
        return problem
    node = node_of(request)
    return web.json_response(_encoded(mappings_answer(node.keys.applied_state.security_metadata(), None)))


@routes.add(
    Route(
        "GET",
        "/_security/role_mapping/{mapping}",
        "One role mapping, by name.",
        Privilege.SECURITY,
        dict[str, t.RoleMappingAnswer],
        params=(LOCAL, *TIMEOUTS),
        errors=(400, 404, 503),
    )
)
async def mapping_get(request: web.Request, query: Query) -> web.StreamResponse:
    name = request.match_info["mapping"]
    problem = await read_problem(request, query)
    if problem is not None:
        return problem
    node = node_of(request)
    found = mappings_answer(node.keys.applied_state.security_metadata(), name)
    if not found:
        return error_response("resource_not_found_exception", f"role mapping [{name}] not found", 404)
    return web.json_response(_encoded(found))


@routes.add(
    Route(
        "PUT",
        "/_security/role_mapping/{mapping}",
        "Define or replace a role mapping: roles given to the principals it names.",
        Privilege.SECURITY,
        t.RoleMappingChanged,
        params=TIMEOUTS,
        body=RoleMapping,
        errors=CHANGE_ERRORS,
        description='`{"roles": ["app-a"], "principals": ["system:serviceaccount:team-a:app", "app-a-*"]}`: a '
        "principal is a name, or a name's start followed by `*`. A change that would leave no mapping to "
        "`admin` is refused (400) unless the tokens file names an admin.",
    )
)
async def mapping_put(request: web.Request, query: Query) -> web.StreamResponse:
    name = checked_name(request, "mapping", name_problem(request.match_info["mapping"], "role mapping"))
    timeout_ms = timeout_of(query)
    mapping = decode_body(await read_json(request), RoleMapping, "role mapping")
    problem = mapping_problem(mapping)
    if problem is not None:
        raise BadRequest(f"invalid role mapping: {describe_problem(problem)}")
    node = node_of(request)
    security_of(node)
    return changed(await node.call(PutRoleMapping(name, mapping, file_admins(node)), timeout_ms), "role_mapping")


@routes.add(
    Route(
        "DELETE",
        "/_security/role_mapping/{mapping}",
        "Delete a role mapping.",
        Privilege.SECURITY,
        t.Deleted,
        params=TIMEOUTS,
        errors=CHANGE_ERRORS,
    )
)
async def mapping_delete(request: web.Request, query: Query) -> web.StreamResponse:
    name = checked_name(request, "mapping", name_problem(request.match_info["mapping"], "role mapping"))
    timeout_ms = timeout_of(query)
    await no_body(request)
    node = node_of(request)
    security_of(node)
    return deleted(await node.call(DeleteRoleMapping(name, file_admins(node)), timeout_ms))


def _encoded(answers: dict[str, Any]) -> dict[str, Any]:
    return {name: msgspec.to_builtins(answer) for name, answer in answers.items()}
