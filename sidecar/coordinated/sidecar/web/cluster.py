"""The cluster, as Elasticsearch's cluster APIs show and change it: the node's info, the cluster state, health,
the master, the persistent settings and the voting-configuration exclusions."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from coordinated.coordination.client import ClusterError, Committed
from coordinated.coordination.node_versions import version_to_api, versions_to_api
from coordinated.coordination.requests.cluster import (
    AddVotingConfigExclusions,
    ClearVotingConfigExclusions,
    UpdateSettings,
)
from coordinated.coordination.settings import CLUSTER_NAME
from coordinated.coordination.state import state_to_api
from coordinated.coordination.validation import settings_problem
from coordinated.coordination.wire_versions import MINIMUM_COMPATIBLE
from coordinated.sidecar.node import Node
from coordinated.sidecar.observability.problems import RED, YELLOW, ProblemKind
from coordinated.sidecar.web import api_types as t
from coordinated.sidecar.web import state_filter
from coordinated.sidecar.web.app_keys import node_of
from coordinated.sidecar.web.errors import BadRequest, master_not_discovered, result_error
from coordinated.sidecar.web.inputs import (
    DEFAULT_TIMEOUT,
    decode_body,
    no_body,
    param_bool,
    param_int,
    param_time_ms,
    read_json,
    timeout_of,
)
from coordinated.sidecar.web.privileges import Privilege
from coordinated.sidecar.web.reads import read_barrier
from coordinated.sidecar.web.routes import (
    BOOLEAN,
    COUNT,
    LOCAL,
    MASTER_TIMEOUT,
    TIME_VALUE,
    TIMEOUTS,
    WRITE_ERRORS,
    KeysFrom,
    Param,
    Query,
    Route,
    Routes,
)

routes = Routes()
_WAIT_FOR_NODES = re.compile(r"^(>=|<=|>|<|ge\(|le\(|gt\(|lt\()?(\d+)\)?$")


@routes.add(
    Route(
        "GET",
        "/",
        "This node's name, id, cluster, mode, term, release and wire version.",
        Privilege.MONITOR,
        t.NodeInfo,
    )
)
async def root(request: web.Request, query: Query) -> web.StreamResponse:
    status = node_of(request).status()
    core = status.core
    assert core is not None
    return web.json_response(
        {
            "name": status.node_name,
            "node_id": status.node_id,
            "cluster_name": status.settings[CLUSTER_NAME],
            "cluster_uuid": status.applied_state.cluster_uuid,
            "transport_address": status.transport_address,
            "mode": str(core.mode),
            "term": core.term,
            "version": version_to_api(core.versions.version, minimum_wire_compatibility_version=MINIMUM_COMPATIBLE),
            "tagline": "You Know, for Coordination",
        }
    )


@routes.add(
    Route(
        "GET",
        "/_cluster/state",
        "The cluster state: members, voting configuration, keys, sessions, settings, repositories.",
        Privilege.READ,
        t.ClusterStateAnswer,
        keys=KeysFrom.ALL,
        params=(
            LOCAL,
            Param("wait_for_version", COUNT, "first wait until this node has applied this version or a later one"),
            Param("wait_for_timeout", TIME_VALUE, "how long `wait_for_version` waits; default 30s"),
            MASTER_TIMEOUT,
            Param(
                "filter_path",
                {"type": "string", "examples": ["master_node,nodes,metadata.cluster_coordination"]},
                "only the fields it names (comma-separated dotted paths, `*` in a name, `**` for any levels); the "
                "keys and sessions are not rendered unless it selects them",
            ),
        ),
        errors=(400, 503),
        description=(
            "Without `local`, after a read barrier: includes every write acknowledged before the request. With "
            "`filter_path`, only the fields it names."
        ),
    )
)
async def cluster_state(request: web.Request, query: Query) -> web.StreamResponse:
    local = param_bool(query, "local", False)
    wait_for = param_int(query, "wait_for_version", None)
    wait_ms = param_time_ms(query, "wait_for_timeout", "30s")
    timeout_ms = timeout_of(query)  # checked even with `local`, which does not wait for the master
    node = node_of(request)
    timed_out = False
    if wait_for is not None:
        timed_out = not await node.keys.wait_for_version(wait_for, wait_ms / 1000)
    if not local:
        if node.keys.applied_state.master_node is None:
            return master_not_discovered()
        problem = await read_barrier(node, timeout_ms)
        if problem is not None:
            return problem
    if "filter_path" not in request.query:
        body = state_to_api(node.keys.applied_state)
        if wait_for is not None:
            body["wait_for_timed_out"] = timed_out
        return web.json_response(body)
    try:
        patterns = state_filter.parse(request.query["filter_path"])
    except ValueError as error:
        raise BadRequest(str(error)) from None
    body = state_to_api(state_filter.lighten(node.keys.applied_state, patterns))
    if wait_for is not None:
        body["wait_for_timed_out"] = timed_out
    return web.json_response(state_filter.apply(body, patterns))


def health_body(node: Node) -> dict[str, Any]:
    snapshot = node.status()
    core = snapshot.core
    assert core is not None
    state = snapshot.applied_state
    nodes = state.nodes if state.master_node is not None else {}
    status = core.health.value
    problem = core.formation_problem
    if problem and snapshot.unresolved_seeds:
        problem += f"; cannot resolve seed hosts {list(snapshot.unresolved_seeds)}"
    foreign = core.foreign_clusters
    if foreign:
        problem = f"{problem}; {foreign}" if problem else foreign
    persistence_problem = snapshot.persistence_failure
    problems = node.problems()
    history = snapshot.history
    if status == "green" and any(found.kind in YELLOW for found in problems):
        status = "yellow"  # the node works, but its volume is filling up, its history lost something or is not archived
    if any(found.kind in RED for found in problems):
        status = "red"  # this node cannot accept states: whatever it serves may be stale
    if problem:
        # Why no master, as far as the transport can tell: peers that refused this node, or that it refused.
        refused = [found.reason for found in problems if found.kind is ProblemKind.TRANSPORT]
        problem = "; ".join([problem, *refused])
    archive_problem = next((found.reason for found in problems if found.kind is ProblemKind.ARCHIVE), None)
    return {
        "cluster_name": state.cluster_name,
        "cluster_uuid": state.cluster_uuid,
        "status": status,
        "timed_out": False,
        "master_node": state.master_node,
        "number_of_nodes": len(nodes),
        "number_of_master_eligible_nodes": sum(1 for n in nodes.values() if n.master_eligible),
        "formation_problem": problem,
        "persistence_problem": persistence_problem,
        "disk_problem": history.disk_problem or None,
        "history_problem": history.history_problem or None,
        "archive_problem": archive_problem,
        "problems": [found.to_api() for found in problems],
        "mode": str(core.mode),
        "term": core.term,
        "version": state.version,
        **versions_to_api(core.versions, state),
    }


def nodes_predicate(spec: str) -> Callable[[int], bool]:
    match = _WAIT_FOR_NODES.match(spec.strip())
    if not match:
        raise BadRequest(f"failed to parse parameter [wait_for_nodes]: expected N, >=N, <=N, >N or <N, got [{spec}]")
    op, count = (match.group(1) or "").rstrip("("), int(match.group(2))
    return {
        "": lambda n: n == count,
        ">=": lambda n: n >= count,
        "ge": lambda n: n >= count,
        "<=": lambda n: n <= count,
        "le": lambda n: n <= count,
        ">": lambda n: n > count,
        "gt": lambda n: n > count,
        "<": lambda n: n < count,
        "lt": lambda n: n < count,
    }[op]


@routes.add(
    Route(
        "GET",
        "/_cluster/health",
        "The cluster's health (green, yellow, red) as this node sees it, with the problems it knows of.",
        Privilege.MONITOR,
        t.HealthAnswer,
        params=(
            Param("wait_for_nodes", {"type": "string", "pattern": r"^(>=|<=|>|<)?\d+$"}, "wait until N, >=N ... nodes"),
            Param("timeout", TIME_VALUE, "how long `wait_for_nodes` waits; default 30s"),
            LOCAL,
            MASTER_TIMEOUT,
        ),
        also=((408, "`wait_for_nodes` did not hold within `timeout`: the health as it is, with `timed_out: true`."),),
    )
)
async def cluster_health(request: web.Request, query: Query) -> web.StreamResponse:
    param_bool(query, "local", False)
    param_time_ms(query, "master_timeout", DEFAULT_TIMEOUT)  # accepted for Elasticsearch's clients: no effect
    timeout_ms = param_time_ms(query, "timeout", "30s")
    node = node_of(request)
    if "wait_for_nodes" in query:
        predicate = nodes_predicate(query["wait_for_nodes"])

        def ready() -> bool:
            return node.keys.applied_state.master_node is not None and predicate(len(node.keys.applied_state.nodes))

        if not await node.keys.wait_for(ready, timeout_ms / 1000):
            body = health_body(node)
            body["timed_out"] = True
            return web.json_response(body, status=408)
    return web.json_response(health_body(node))


@routes.add(
    Route(
        "GET",
        "/_cat/master",
        "The master node as a row: `format=json` for JSON, otherwise one line of text.",
        Privilege.MONITOR,
        list[t.MasterRow],
        or_text=True,
        params=(
            Param("format", {"type": "string", "enum": ["json", "text"]}, "json, or text (the default)"),
            Param("v", BOOLEAN, "with a header line (text)"),
            Param("h", {"type": "string"}, "accepted and ignored"),
            LOCAL,
        ),
        errors=(400, 503),
    )
)
async def cat_master(request: web.Request, query: Query) -> web.StreamResponse:
    param_bool(query, "local", False)  # the answer is this node's applied state either way
    header = param_bool(query, "v", False)
    fmt = query.get("format", "text")
    if fmt not in ("json", "text"):
        raise BadRequest(f"unsupported format [{fmt}]; use json or text")
    node = node_of(request)
    state = node.keys.applied_state
    master = state.nodes.get(state.master_node) if state.master_node else None
    if master is None:
        return master_not_discovered()
    host = master.transport_address.rpartition(":")[0].strip("[]")
    row = {"id": master.id, "host": host, "ip": host, "node": master.name}
    if fmt == "json":
        return web.json_response([row])
    header_line = "id host ip node\n" if header else ""
    return web.Response(text=f"{header_line}{row['id']} {row['host']} {row['ip']} {row['node']}\n")


@routes.add(
    Route(
        "GET",
        "/_cat/nodes",
        "The nodes as rows, with their roles, the master, and each node's release and wire version: `format=json` "
        "for JSON, otherwise a line of text per node.",
        Privilege.MONITOR,
        list[t.NodeRow],
        or_text=True,
        params=(
            Param("format", {"type": "string", "enum": ["json", "text"]}, "json, or text (the default)"),
            Param("v", BOOLEAN, "with a header line (text)"),
            Param("h", {"type": "string"}, "accepted and ignored"),
            LOCAL,
        ),
        errors=(400,),
    )
)
async def cat_nodes(request: web.Request, query: Query) -> web.StreamResponse:
    """The nodes of this node's applied state, with their roles, the master, and each one's release and wire
    version (as this node knows them: `-` when it does not)."""
    param_bool(query, "local", False)  # the answer is this node's applied state either way
    header = param_bool(query, "v", False)
    fmt = query.get("format", "text")
    if fmt not in ("json", "text"):
        raise BadRequest(f"unsupported format [{fmt}]; use json or text")
    status = node_of(request).status()
    assert status.core is not None
    versions = status.core.versions.node_versions
    state = status.applied_state
    rows = []
    for node_id, member in sorted(state.nodes.items(), key=lambda item: item[1].name):
        version = versions.get(node_id)
        host = member.transport_address.rpartition(":")[0].strip("[]")
        rows.append(
            {
                "id": node_id,
                "name": member.name,
                "ip": host,
                "transport_address": member.transport_address,
                "node.role": "m" if member.master_eligible else "-",
                "master": "*" if node_id == state.master_node else "-",
                "version": version.release if version is not None else None,
                "wire_version": version.wire if version is not None else None,
            }
        )
    if fmt == "json":
        return web.json_response(rows)
    columns = ("id", "name", "ip", "node.role", "master", "version", "wire_version")
    lines = [" ".join(columns)] if header else []
    lines += [" ".join("-" if row[column] is None else str(row[column]) for column in columns) for row in rows]
    return web.Response(text="".join(line + "\n" for line in lines))


@routes.add(
    Route(
        "GET",
        "/_cluster/settings",
        "The persistent cluster settings.",
        Privilege.MANAGE,
        t.SettingsAnswer,
        params=(
            LOCAL,
            Param("include_defaults", BOOLEAN, "accepted and ignored"),
            Param("flat_settings", BOOLEAN, "accepted and ignored: settings are always flat"),
        ),
    )
)
async def settings_get(request: web.Request, query: Query) -> web.StreamResponse:
    for name in ("local", "include_defaults", "flat_settings"):  # accepted for Elasticsearch's clients: no effect
        param_bool(query, name, False)
    node = node_of(request)
    return web.json_response({"persistent": dict(node.keys.applied_state.persistent_settings), "transient": {}})


def flatten_settings(prefix: str, values: Mapping[str, Any], out: dict[str, str | None]) -> None:
    for name, value in values.items():
        full = f"{prefix}{name}"
        if isinstance(value, dict):
            flatten_settings(full + ".", value, out)
        elif value is None:
            out[full] = None
        elif isinstance(value, bool):
            out[full] = "true" if value else "false"
        elif isinstance(value, str | int | float):
            out[full] = str(value)
        else:
            raise BadRequest(f"setting [{full}] must be a string, number, boolean or null, got {type(value).__name__}")


@routes.add(
    Route(
        "PUT",
        "/_cluster/settings",
        "Update persistent cluster settings (null resets one).",
        Privilege.MANAGE,
        t.SettingsUpdated,
        params=(*TIMEOUTS, Param("flat_settings", BOOLEAN, "accepted and ignored")),
        body=t.SettingsBody,
        errors=WRITE_ERRORS,
    )
)
async def settings_put(request: web.Request, query: Query) -> web.StreamResponse:
    param_bool(query, "flat_settings", False)  # accepted for Elasticsearch's clients: no effect
    timeout_ms = timeout_of(query)
    body = decode_body(await read_json(request), t.SettingsBody, "settings body")
    updates: dict[str, str | None] = {}
    flatten_settings("", body.persistent, updates)
    problem = settings_problem(updates, node_of(request).status().settings.registry)
    if problem is not None:
        raise BadRequest(problem)
    result = await node_of(request).call(UpdateSettings(persistent=updates), timeout_ms)
    if isinstance(result, Committed):
        return web.json_response({"acknowledged": True, "persistent": updates, "transient": {}})
    return result_error(result)


def _names(query: Mapping[str, str], name: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in query.get(name, "").split(",") if part.strip())


def exclusions_result(node: Node, result: Committed | ClusterError) -> web.Response:
    if isinstance(result, Committed):
        exclusions = node.keys.applied_state.coordination.voting_config_exclusions
        return web.json_response(
            {
                "acknowledged": True,
                "voting_config_exclusions": [{"node_id": e.node_id, "node_name": e.node_name} for e in exclusions],
            }
        )
    return result_error(result)


@routes.add(
    Route(
        "POST",
        "/_cluster/voting_config_exclusions",
        "Exclude master-eligible nodes from the voting configuration (before removing them).",
        Privilege.MANAGE,
        t.ExclusionsAnswer,
        params=(
            Param("node_names", {"type": "string"}, "comma-separated node names"),
            Param("node_ids", {"type": "string"}, "comma-separated node ids"),
            *TIMEOUTS,
        ),
        errors=(400, 503),
    )
)
async def exclusions_add(request: web.Request, query: Query) -> web.StreamResponse:
    exclusions = AddVotingConfigExclusions(node_names=_names(query, "node_names"), node_ids=_names(query, "node_ids"))
    timeout_ms = timeout_of(query)
    await no_body(request)
    node = node_of(request)
    # The master checks the request, and cluster.max_voting_config_exclusions against the exclusions it holds.
    result = await node.call(exclusions, timeout_ms)
    return exclusions_result(node, result)


@routes.add(
    Route(
        "DELETE",
        "/_cluster/voting_config_exclusions",
        "Clear the voting-configuration exclusions.",
        Privilege.MANAGE,
        t.ExclusionsAnswer,
        params=(Param("wait_for_removal", BOOLEAN, "only once the excluded nodes have left"), *TIMEOUTS),
        errors=(400, 503),
    )
)
async def exclusions_clear(request: web.Request, query: Query) -> web.StreamResponse:
    wait = param_bool(query, "wait_for_removal", True)
    timeout_ms = timeout_of(query)
    await no_body(request)
    node = node_of(request)
    result = await node.call(ClearVotingConfigExclusions(wait_for_removal=wait), timeout_ms)
    return exclusions_result(node, result)
