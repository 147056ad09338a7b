"""Watches of the keys under prefixes: a long poll that answers the changes after a version at once or
waits for one, or a stream (`stream=true`) that a node's StreamHub feeds as it applies states
(features/watch_streams.py), on a chunked response (http_chunks.py)."""

from __future__ import annotations

import asyncio

from aiohttp import HttpVersion11, web

from coordinated.coordination.authorization import READ, KeyAccess
from coordinated.coordination.client import ClusterError
from coordinated.coordination.quotas import quota_index
from coordinated.sidecar.features.change_log import ChangesGone
from coordinated.sidecar.features.watch_streams import (
    AFTER_VERSION_HEADER,
    CLOSE_GRACE_S,
    LOST_MASTER,
    Filter,
    after_version_problem,
    event_line,
)
from coordinated.sidecar.features.watch_streams import line as stream_line
from coordinated.sidecar.node import Node
from coordinated.sidecar.web import api_types as t
from coordinated.sidecar.web.access import authorize, permissions_of, principal_of
from coordinated.sidecar.web.app_keys import node_of
from coordinated.sidecar.web.errors import BadRequest, error_response, result_error
from coordinated.sidecar.web.http_chunks import chunk
from coordinated.sidecar.web.inputs import DEFAULT_TIMEOUT, no_body, param_bool, param_int, param_time_ms, query_prefix
from coordinated.sidecar.web.privileges import Privilege
from coordinated.sidecar.web.reads import consistent_read
from coordinated.sidecar.web.routes import (
    BOOLEAN,
    COUNT,
    LOCAL,
    MASTER_TIMEOUT,
    TIME_VALUE,
    KeysFrom,
    Param,
    Query,
    Route,
    Routes,
)

routes = Routes()
# A watch waits at most this long per request (the client asks again); a longer wait only holds connections.
WATCH_MAX_TIMEOUT_MS = 300_000
# Events per answer: the rest follow on the next request (whole steps only, so a little more is possible).
WATCH_MAX_EVENTS = 1000
_STREAM_ONLY = ("prev_value", "filter")


@routes.add(
    Route(
        "GET",
        "/_cluster/metadata/_watch",
        "The changes under `prefix` after `after_version`, waiting up to `timeout` for one; with `stream=true`,"
        " every change as it comes, one JSON object per line, until the client closes the stream.",
        Privilege.READ,
        t.WatchAnswer,
        keys=KeysFrom.PREFIX,
        params=(
            Param(
                "prefix",
                {"type": "string"},
                "only the keys that start with this; default every key; with `stream`, give it several times for "
                "the keys under any of them",
                repeatable=True,
            ),
            Param(
                "after_version",
                COUNT,
                "changes after this version; default from now (a stream's answer names that version in its "
                "`X-Coordinated-After-Version` header); beyond the cluster's version: 400, unless `local`",
            ),
            Param("timeout", TIME_VALUE, "how long to wait for a change; default 30s, at most 5m; not with `stream`"),
            MASTER_TIMEOUT,
            LOCAL,
            Param("stream", BOOLEAN, "a stream (`application/x-ndjson`); `prefix` may then be given several times"),
            Param("prev_value", BOOLEAN, "a stream's events carry the key as it was before (needs `stream`)"),
            Param("filter", {"type": "string", "enum": ["put", "delete"]}, "only these events (needs `stream`)"),
        ),
        or_ndjson=True,
        errors=(400, 410, 503),
    )
)
async def metadata_watch(request: web.Request, query: Query) -> web.StreamResponse:
    """Every change under `prefix` after `after_version` (omitted: from now): with `stream=true` on one held
    response as they come (watch_streams.py), otherwise in one answer, waiting up to `timeout` for one."""
    given = request.query.getall("prefix", []) if query else []
    prefixes = tuple(query_prefix({"prefix": prefix}) for prefix in given) or ("",)
    after = param_int(query, "after_version", None)
    master_timeout_ms = param_time_ms(query, "master_timeout", DEFAULT_TIMEOUT)
    local = param_bool(query, "local", False)
    await no_body(request)
    if param_bool(query, "stream", False):
        if "timeout" in query:
            raise BadRequest("a stream has no [timeout]: it lasts until the client closes it")
        filter_: Filter = None
        if "filter" in query:
            if query["filter"] not in ("put", "delete"):
                raise BadRequest(f"parameter [filter] must be [put] or [delete], got [{query['filter']}]")
            filter_ = "put" if query["filter"] == "put" else "delete"
        prev_value = param_bool(query, "prev_value", False)
        return await watch_stream(request, prefixes, after, filter_, prev_value, local, master_timeout_ms)
    if len(prefixes) > 1:
        raise BadRequest("several [prefix] parameters need [stream=true]")
    for name in _STREAM_ONLY:
        if name in query:
            raise BadRequest(f"parameter [{name}] needs [stream=true]")
    prefix = prefixes[0]
    timeout_ms = param_time_ms(query, "timeout", DEFAULT_TIMEOUT)
    if timeout_ms > WATCH_MAX_TIMEOUT_MS:
        raise BadRequest(f"parameter [timeout] must be at most 5m, got [{query['timeout']}]")
    node = node_of(request)
    deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
    problem = await consistent_read(node, local, master_timeout_ms)
    if problem is not None:
        return problem
    hub = node.keys.key_watches
    if after is None:
        after = hub.log.version
    elif not local and (problem_text := after_version_problem(after, hub.log.version)) is not None:
        raise BadRequest(problem_text)
    while True:
        # Again after every wait: the principal may have lost `read` on the prefix meanwhile.
        authorize(request, permissions_of(request), (KeyAccess(READ, prefix, prefix=True),))
        try:
            events, version = hub.log.events_after(prefix, after, WATCH_MAX_EVENTS)
        except ChangesGone as gone:
            return error_response("resource_gone_exception", str(gone), 410)
        remaining = deadline - asyncio.get_running_loop().time()
        if events or remaining <= 0 or hub.closed:
            return web.json_response({"version": version, "events": [event.to_api() for event in events]})
        # Nothing under the prefix up to `version`: park from there. Unless a state then changes a key under
        # the prefix, nothing has changed for this watcher, however far the log moves on meanwhile.
        after = version
        if not await hub.wait(prefix, remaining):
            return web.json_response({"version": max(after, hub.log.version), "events": []})


async def watch_stream(
    request: web.Request,
    prefixes: tuple[str, ...],
    after: int | None,
    filter_: Filter,
    prev_value: bool,
    local: bool,
    master_timeout_ms: int,
) -> web.StreamResponse:
    """One read barrier, the changes the log holds after `after` (written as the client reads them), then the
    stream joins its group in the node's StreamHub, which feeds it as states are applied, until it ends."""
    if request.version < HttpVersion11:
        raise BadRequest("a watch stream needs HTTP/1.1: its body is chunked")
    node = node_of(request)
    problem = await consistent_read(node, local, master_timeout_ms)
    if problem is not None:
        return problem
    ticket = node.keys.stream_quotas.admit(prefixes, quota_index(node.keys.applied_state.security_metadata()))
    if isinstance(ticket, ClusterError):
        return result_error(ticket)
    try:
        return await _serve_stream(request, node, prefixes, after, filter_, prev_value, local)
    finally:
        node.keys.stream_quotas.release(ticket)


async def _serve_stream(
    request: web.Request,
    node: Node,
    prefixes: tuple[str, ...],
    after: int | None,
    filter_: Filter,
    prev_value: bool,
    local: bool,
) -> web.StreamResponse:
    changes = node.keys.key_watches.log
    if after is None:
        after = changes.version
    elif not local and (problem_text := after_version_problem(after, changes.version)) is not None:
        raise BadRequest(problem_text)
    # The start goes out first, with the headers: a client whose stream breaks before a line resumes there.
    headers = {"Content-Type": "application/x-ndjson", AFTER_VERSION_HEADER: str(after)}
    response = web.StreamResponse(headers=headers)
    response.enable_chunked_encoding()
    await response.prepare(request)
    while True:  # the backlog, flow-controlled; then, without an await in between, the live stream
        try:
            events, version = changes.events_after(prefixes, after, WATCH_MAX_EVENTS)
        except ChangesGone as gone:
            await response.write(stream_line(type="gone", version=changes.version, oldest=gone.base))
            await response.write_eof()
            return response
        if not events:
            break
        lines = [event_line(event, prev_value) for event in events if filter_ is None or event.type == filter_]
        if lines:
            await response.write(b"".join(lines))
        after = version
    transport = request.transport
    if transport is None or transport.is_closing():
        return response
    hub = node.keys.watch_streams
    stream = hub.add(
        transport, prefixes, filter_, prev_value, after, needs_master=not local, principal=principal_of(request)
    )
    transport.write(chunk(stream_line(type="progress", version=after)))  # live from here
    if not local and node.keys.applied_state.master_node is None:
        hub.end(stream, LOST_MASTER)  # lost during the backlog
    try:
        await stream.ended
    finally:
        hub.remove(stream)
    if not transport.is_closing():
        try:
            async with asyncio.timeout(CLOSE_GRACE_S):
                await response.write_eof()
        except (TimeoutError, ConnectionError):
            transport.abort()  # a client that does not read even its stream's end
    return response
