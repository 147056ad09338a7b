"""Quotas per key prefix: `PUT /_quota/NAME` sets the limits of what is stored and done under a prefix,
`GET /_quota/NAME` shows them with their usage, `DELETE /_quota/NAME` removes them.

Keys, bytes, sessions and writes per second are held to their limits by the master, in each batch (exact under
any concurrency: coordination/quotas.py); watch streams by each node, for its own (features/watch_streams.py).
A quota whose limits are below what its prefix uses now is refused (400) unless `force=true`, which stops only
the growth. Setting and deleting quotas needs the `security` privilege; reading them, `monitor`.
"""

from __future__ import annotations

import msgspec
from aiohttp import web

from coordinated.coordination.client import ClusterError, Committed
from coordinated.coordination.quotas import Usage
from coordinated.coordination.requests.security import DeleteQuota, PutQuota
from coordinated.coordination.security import Quota, describe_problem, name_problem, quota_problem
from coordinated.sidecar.node import Node
from coordinated.sidecar.web import api_types as t
from coordinated.sidecar.web.app_keys import node_of
from coordinated.sidecar.web.errors import BadRequest, error_response
from coordinated.sidecar.web.inputs import decode_body, no_body, param_bool, read_json, timeout_of
from coordinated.sidecar.web.privileges import Privilege
from coordinated.sidecar.web.routes import BOOLEAN, LOCAL, TIMEOUTS, WRITE_ERRORS, Param, Query, Route, Routes
from coordinated.sidecar.web.security import changed, deleted, read_problem, security_of

routes = Routes()


def quota_answer(node: Node, quota: Quota, usage: Usage) -> t.QuotaAnswer:
    return t.QuotaAnswer(
        prefix=quota.prefix,
        max_keys=quota.max_keys,
        max_bytes=quota.max_bytes,
        max_sessions=quota.max_sessions,
        max_watch_streams=quota.max_watch_streams,
        max_writes_per_second=quota.max_writes_per_second,
        usage=t.QuotaUsageAnswer(usage.keys, usage.bytes, usage.sessions, node.keys.stream_quotas.count(quota.prefix)),
    )


def quotas_answer(node: Node, name: str | None) -> dict[str, object]:
    state = node.keys.applied_state
    security = state.security_metadata()
    if security is None:
        return {}
    usage = node.keys.quota_usage.at(state).usage
    return {
        key: quota_answer(node, quota, usage.get(key, Usage()))
        for key, quota in sorted(security.quotas.items())
        if name is None or key == name
    }


@routes.add(
    Route(
        "GET",
        "/_quota",
        "Every quota, with its usage.",
        Privilege.MONITOR,
        dict[str, t.QuotaAnswer],
        params=(LOCAL, *TIMEOUTS),
        errors=(400, 503),
    )
)
async def quotas_get(request: web.Request, query: Query) -> web.StreamResponse:
    problem = await read_problem(request, query)
    if problem is not None:
        return problem
    return web.json_response(_builtins(quotas_answer(node_of(request), None)))


@routes.add(
    Route(
        "GET",
        "/_quota/{quota}",
        "One quota, with its usage: keys, bytes and sessions under its prefix, and this node's watch streams.",
        Privilege.MONITOR,
        dict[str, t.QuotaAnswer],
        params=(LOCAL, *TIMEOUTS),
        errors=(400, 404, 503),
    )
)
async def quota_get(request: web.Request, query: Query) -> web.StreamResponse:
    name = request.match_info["quota"]
    problem = await read_problem(request, query)
    if problem is not None:
        return problem
    found = quotas_answer(node_of(request), name)
    if not found:
        return error_response("resource_not_found_exception", f"quota [{name}] not found", 404)
    return web.json_response(_builtins(found))


@routes.add(
    Route(
        "PUT",
        "/_quota/{quota}",
        "Define or replace a quota: limits on what is stored and done under a prefix.",
        Privilege.SECURITY,
        t.QuotaChanged,
        params=(
            *TIMEOUTS,
            Param("force", BOOLEAN, "set limits below what the prefix uses now: only its growth is then refused"),
        ),
        body=Quota,
        errors=(*WRITE_ERRORS, 404),
        description='`{"prefix": "app/a/", "max_keys": 1000, "max_bytes": 1048576, "max_sessions": 10, '
        '"max_watch_streams": 20, "max_writes_per_second": 100}` (at least one limit). A request that would pass '
        "one gets 429 `quota_exceeded_exception` naming the quota and the limit.",
    )
)
async def quota_put(request: web.Request, query: Query) -> web.StreamResponse:
    name = request.match_info["quota"]
    problem = name_problem(name, "quota")
    if problem is not None:
        raise BadRequest(problem)
    timeout_ms = timeout_of(query)
    force = param_bool(query, "force", False)
    quota = decode_body(await read_json(request), Quota, "quota")
    found = quota_problem(quota)
    if found is not None:
        raise BadRequest(f"invalid quota: {describe_problem(found)}")
    node = node_of(request)
    security_of(node)
    result: Committed | ClusterError = await node.call(PutQuota(name, quota, force), timeout_ms)
    return changed(result, "quota")


@routes.add(
    Route(
        "DELETE",
        "/_quota/{quota}",
        "Delete a quota.",
        Privilege.SECURITY,
        t.Deleted,
        params=TIMEOUTS,
        errors=(*WRITE_ERRORS, 404),
    )
)
async def quota_delete(request: web.Request, query: Query) -> web.StreamResponse:
    name = request.match_info["quota"]
    problem = name_problem(name, "quota")
    if problem is not None:
        raise BadRequest(problem)
    timeout_ms = timeout_of(query)
    await no_body(request)
    node = node_of(request)
    security_of(node)
    return deleted(await node.call(DeleteQuota(name), timeout_ms))


def _builtins(answers: dict[str, object]) -> dict[str, object]:
    return {name: msgspec.to_builtins(answer) for name, answer in answers.items()}
