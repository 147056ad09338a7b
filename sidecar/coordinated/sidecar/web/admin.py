"""This node's own administration: its history, metrics, probes, local hooks and the API's OpenAPI document."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from coordinated.coordination.context import Mode
from coordinated.coordination.validation import hook_name_problem
from coordinated.sidecar.events.history import read_events_after
from coordinated.sidecar.events.history_read import UnreadableHistory
from coordinated.sidecar.features.hooks import MAX_HOOKS, HookSpec
from coordinated.sidecar.observability.problems import BLOCKING
from coordinated.sidecar.web import api_types as t
from coordinated.sidecar.web.app_keys import DOCUMENT_KEY, node_of
from coordinated.sidecar.web.errors import BadRequest, error_response
from coordinated.sidecar.web.inputs import decode_body, no_body, param_int, read_json
from coordinated.sidecar.web.privileges import Privilege
from coordinated.sidecar.web.routes import COUNT, NdJson, Param, Query, Route, Routes, Text

routes = Routes()


@routes.add(
    Route(
        "GET",
        "/_history",
        "This node's history events (the audit's input), one JSON object per line.",
        Privilege.MONITOR,
        NdJson,
        params=(
            Param("after_seq", COUNT, "events after this sequence number"),
            Param("size", {**COUNT, "minimum": 1}, "at most this many events"),
        ),
        errors=(400, 500),
    )
)
async def history(request: web.Request, query: Query) -> web.StreamResponse:
    after = param_int(query, "after_seq", 0) or 0
    size = param_int(query, "size", None, minimum=1)
    node = node_of(request)
    response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    batch: list[bytes] = []
    try:
        for line in read_events_after(node.status().history_dir, after, size):
            batch.append(line)
            if len(batch) >= 512:
                if not response.prepared:  # the status is sent with the first lines, once some could be read
                    await response.prepare(request)
                await response.write(b"".join(batch))
                batch = []
    except UnreadableHistory as error:
        if response.prepared:  # cut off: the reader sees an incomplete answer, never a shorter history
            raise
        return error_response("history_damaged_exception", f"cannot read this node's history: {error}", 500)
    if not response.prepared:
        await response.prepare(request)
    if batch:
        await response.write(b"".join(batch))
    await response.write_eof()
    return response


# Prometheus sends a bearer token (`authorization` in its scrape config); the metrics name the nodes and the
# cluster's activity, which is not for anyone on the network.
@routes.add(Route("GET", "/metrics", "Prometheus metrics of this node.", Privilege.MONITOR, Text))
async def metrics(request: web.Request, query: Query) -> web.StreamResponse:
    body = node_of(request).metrics.render()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


@routes.add(
    Route(
        "GET",
        "/healthz",
        "Liveness: 200 while the process serves requests.",
        Privilege.NONE,
        t.Healthz,
        check_params=False,
        errors=(),
    )
)
async def healthz(request: web.Request, query: Query) -> web.StreamResponse:
    return web.json_response({"status": "ok"})


@routes.add(
    Route(
        "GET",
        "/readyz",
        "Readiness: 200 once this node has a master and no blocking problem, else 503 with the reason.",
        Privilege.NONE,
        t.Readiness,
        check_params=False,
        errors=(),
        also=((503, "Not ready; `reason` says why."),),
    )
)
async def readyz(request: web.Request, query: Query) -> web.StreamResponse:
    node = node_of(request)
    status = node.status()
    core = status.core
    assert core is not None
    blocking = [found.reason for found in node.problems() if found.kind in BLOCKING]
    if blocking:
        return web.json_response({"ready": False, "reason": "; ".join(blocking)}, status=503)
    if status.applied_state.master_node is not None and core.mode is not Mode.CANDIDATE:
        return web.json_response({"ready": True, "master_node": status.applied_state.master_node})
    return web.json_response({"ready": False, "reason": core.formation_problem or "no master"}, status=503)


@routes.add(
    Route("GET", "/_hooks", "The local hooks, with their delivery counts.", Privilege.MANAGE, dict[str, t.HookAnswer])
)
async def hooks_list(request: web.Request, query: Query) -> web.StreamResponse:
    return web.json_response(node_of(request).hooks.describe())


def hook_name(request: web.Request) -> str:
    name = request.match_info["name"]
    problem = hook_name_problem(name)
    if problem is not None:
        raise BadRequest(problem)
    return name


@routes.add(
    Route(
        "PUT",
        "/_hooks/{name}",
        "Register (201) or replace (200) a local hook: each applied state is posted to it.",
        Privilege.MANAGE,
        t.HookPut,
        also=((201, "The hook was registered."),),
        body=HookSpec,
        errors=(400, 408, 413),
    )
)
async def hook_put(request: web.Request, query: Query) -> web.StreamResponse:
    name = hook_name(request)
    spec = decode_body(await read_json(request), HookSpec, "hook")
    hooks = node_of(request).hooks
    problem = spec.problem(hooks.socket_dir)
    if problem:
        raise BadRequest(problem)
    if name not in hooks.specs and len(hooks.specs) >= MAX_HOOKS:
        raise BadRequest(f"at most {MAX_HOOKS} hooks can be registered")
    created = hooks.put(name, spec)
    return web.json_response({"acknowledged": True, "created": created}, status=201 if created else 200)


@routes.add(
    Route("DELETE", "/_hooks/{name}", "Remove a local hook.", Privilege.MANAGE, t.Acknowledged, errors=(400, 404))
)
async def hook_delete(request: web.Request, query: Query) -> web.StreamResponse:
    name = hook_name(request)
    await no_body(request)
    if not node_of(request).hooks.delete(name):
        return error_response("resource_not_found_exception", f"hook [{name}] not found", 404)
    return web.json_response({"acknowledged": True})


@routes.add(
    Route(
        "GET",
        "/_openapi",
        "This document: the OpenAPI 3.1 description of the client API.",
        Privilege.MONITOR,
        dict[str, Any],
        check_params=False,
    )
)
async def openapi_document(request: web.Request, query: Query) -> web.StreamResponse:
    return web.Response(body=request.app[DOCUMENT_KEY](), content_type="application/json")
