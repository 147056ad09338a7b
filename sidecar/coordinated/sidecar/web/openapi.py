"""The OpenAPI 3.1 document of the client API, generated from the route table and the typed bodies.

Every route of the client app (`api.setup_routes`, the snapshot routes and `GET /_openapi` itself) has an
entry in `OPERATIONS`: its parameters, its body and answer types (`api_types`, turned into JSON Schema by
msgspec) and the errors it may answer. The role a route needs comes from the access table (`access.RULES`).
A route without an entry, or an entry without a route, fails the generation, so the document cannot drift
from the app. The node serves the document at `GET /_openapi`; a copy is checked in as docs/openapi.json:

    python -m coordinated.sidecar.web.openapi            # rewrite docs/openapi.json
    python -m coordinated.sidecar.web.openapi --check    # exit 1 when it is out of date (`make lint` runs it)
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from aiohttp import web

from coordinated.coordination.ranges import MAX_RANGE_LIMIT, RangePage
from coordinated.sidecar.features.hooks import HookSpec
from coordinated.sidecar.web import api_types as t
from coordinated.sidecar.web.access import Role, required_role
from coordinated.sidecar.web.api import setup_routes
from coordinated.sidecar.web.snapshot_api import setup_snapshot_routes

DOCUMENT_PATH = "/_openapi"
REPO = Path(__file__).resolve().parents[4]
DOC = REPO / "docs" / "openapi.json"
JSON = "application/json"
TIME_VALUE = {"type": "string", "pattern": r"^\s*\d+\s*(ms|s|m|h|d)\s*$", "examples": ["30s", "500ms"]}
BOOLEAN = {"type": "string", "enum": ["true", "false", ""]}  # `?local` alone, or `?local=`, means true
COUNT = {"type": "integer", "minimum": 0, "maximum": 9223372036854775807}


@dataclass(frozen=True)
class Param:
    name: str
    schema: dict[str, Any]
    description: str
    required: bool = False


TIMEOUT = Param("timeout", TIME_VALUE, "how long to wait for the master to answer; default 30s, at most 1h")
MASTER_TIMEOUT = Param("master_timeout", TIME_VALUE, "another name of `timeout` (give only one of them)")
TIMEOUTS = (TIMEOUT, MASTER_TIMEOUT)
LOCAL = Param("local", BOOLEAN, "answer from this node's applied state at once, without asking the master")
IF_VERSION = Param("if_version", COUNT, "write only if the key's version is this (0: only if it does not exist)")
PREFIX = Param("prefix", {"type": "string"}, "only the keys that start with this; default every key")
PREV_VALUE = Param(
    "prev_value", BOOLEAN, "the answer carries the key as it was before (`prev`; null: it did not exist)"
)
WAIT_FOR_COMPLETION = Param("wait_for_completion", BOOLEAN, "answer when the work is done")


@dataclass(frozen=True)
class Operation:
    summary: str
    answer: Any  # the JSON answer's type (a tuple: one of them), or a media type's schema (`Text`, `NdJson`)
    status: int = 200
    params: tuple[Param, ...] = ()
    body: Any = None  # the request body's type; None: the route takes no body
    body_required: bool = True
    errors: tuple[int, ...] = (400,)  # besides 401 and 403, which every route behind a token may answer
    description: str = ""
    or_text: bool = False  # the answer may also be `text/plain` (a format chosen by a parameter)
    or_ndjson: bool = False  # the answer may also be `application/x-ndjson` (a stream chosen by a parameter)
    also: tuple[tuple[int, str], ...] = ()  # other statuses answered with the answer's type, and what they mean


class Text(msgspec.Struct):
    """A `text/plain` answer."""


class NdJson(msgspec.Struct):
    """An `application/x-ndjson` answer: one JSON object per line."""


# 503 on a route that needs the master (docs/applications.md, "When the answer is an error").
MASTER_503 = (
    "No master, or the master did not answer in time. `cluster_block_exception`, `master_not_discovered_exception`"
    " and `process_cluster_event_timeout_exception`: nothing was done; retry, ideally on another node. Any other"
    " type (`failed_to_commit_cluster_state_exception`, `not_master_exception`, `timeout_exception`): a write may"
    " or may not take effect; read before retrying a blind write (a conditional write can simply be retried)."
)
ERROR_TEXT = {
    400: "Bad input: an unknown or malformed parameter, a malformed body, a key or value the rules refuse.",
    401: "No token, or one this node does not know (when `http.auth.tokens_file` is set).",
    403: "The token's role is below the role this route needs (`x-required-role`).",
    404: "Not found: the key, session, hook, repository or snapshot named in the path.",
    408: "The request body was not received within 30 s.",
    409: "A conditional write whose condition failed (`version_conflict_engine_exception`); nothing was written.",
    410: "`after_version` is older than this node's change log: read again, then watch from the read's version.",
    413: "The body is over `http.max_content_length`.",
    500: "The node could not read or write a snapshot repository's files (named in the reason).",
    503: MASTER_503,
}
WRITE_ERRORS = (400, 408, 413, 503)
KEY = "/_cluster/metadata/{key}"
# Taken with PUT or POST, as Elasticsearch does.
REGISTER_REPOSITORY = Operation(
    "Register an `fs` snapshot repository under one of the nodes' `path.repo` roots.",
    t.Acknowledged,
    params=(*TIMEOUTS, Param("verify", BOOLEAN, "check first that this node can write there; default true")),
    body=t.RepositoryBody,
    errors=(*WRITE_ERRORS, 500),
)
TAKE_SNAPSHOT = Operation(
    "Take a snapshot of the committed state.",
    t.SnapshotCreated,
    params=(WAIT_FOR_COMPLETION, *TIMEOUTS),
    body=t.SnapshotBody,
    body_required=False,
    errors=(400, 404, 408, 413, 500, 503),
)

OPERATIONS: dict[tuple[str, str], Operation] = {
    ("GET", "/"): Operation("This node's name, id, cluster, mode and term.", t.NodeInfo),
    ("GET", "/_cluster/state"): Operation(
        "The cluster state: members, voting configuration, keys, sessions, settings, repositories.",
        t.ClusterStateAnswer,
        params=(
            LOCAL,
            Param("wait_for_version", COUNT, "first wait until this node has applied this version or a later one"),
            Param("wait_for_timeout", TIME_VALUE, "how long `wait_for_version` waits; default 30s"),
            MASTER_TIMEOUT,
        ),
        errors=(400, 503),
        description=(
            "Without `local`, after a read barrier: includes every write acknowledged before the request. The "
            "common parameter `filter_path` answers only the fields it names (comma-separated dotted paths, `*` in "
            "a name, `**` for any levels), and the keys and sessions are not rendered unless it selects them."
        ),
    ),
    ("GET", "/_cluster/health"): Operation(
        "The cluster's health (green, yellow, red) as this node sees it, with the problems it knows of.",
        t.HealthAnswer,
        params=(
            Param("wait_for_nodes", {"type": "string", "pattern": r"^(>=|<=|>|<)?\d+$"}, "wait until N, >=N ... nodes"),
            Param("timeout", TIME_VALUE, "how long `wait_for_nodes` waits; default 30s"),
            LOCAL,
            MASTER_TIMEOUT,
        ),
        also=((408, "`wait_for_nodes` did not hold within `timeout`: the health as it is, with `timed_out: true`."),),
    ),
    ("GET", "/_cat/master"): Operation(
        "The master node as a row: `format=json` for JSON, otherwise one line of text.",
        list[t.MasterRow],
        or_text=True,
        params=(
            Param("format", {"type": "string", "enum": ["json", "text"]}, "json, or text (the default)"),
            Param("v", BOOLEAN, "with a header line (text)"),
            Param("h", {"type": "string"}, "accepted and ignored"),
            LOCAL,
        ),
        errors=(400, 503),
    ),
    ("POST", "/_cluster/metadata/_txn"): Operation(
        "A transaction: compares, then the success or the failure ops, in one committed state.",
        t.TxnAnswer,
        params=TIMEOUTS,
        body=t.TxnBody,
        errors=WRITE_ERRORS,
    ),
    ("GET", "/_cluster/metadata/_watch"): Operation(
        "The changes under `prefix` after `after_version`, waiting up to `timeout` for one; with `stream=true`,"
        " every change as it comes, one JSON object per line, until the client closes the stream.",
        t.WatchAnswer,
        params=(
            PREFIX,
            Param("after_version", COUNT, "changes after this version; default from now"),
            Param("timeout", TIME_VALUE, "how long to wait for a change; default 30s, at most 5m; not with `stream`"),
            MASTER_TIMEOUT,
            LOCAL,
            Param("stream", BOOLEAN, "a stream (`application/x-ndjson`); `prefix` may then be given several times"),
            Param("prev_value", BOOLEAN, "a stream's events carry the key as it was before (needs `stream`)"),
            Param("filter", {"type": "string", "enum": ["put", "delete"]}, "only these events (needs `stream`)"),
        ),
        or_ndjson=True,
        errors=(400, 410, 503),
    ),
    ("GET", "/_cluster/metadata"): Operation(
        "A page of the keys under `prefix`, in key order, from one state version; or their count.",
        (RangePage, t.KeyCount),  # one of
        params=(
            PREFIX,
            Param("keys_only", BOOLEAN, "without the values"),
            Param("limit", {"type": "integer", "minimum": 1, "maximum": MAX_RANGE_LIMIT}, "keys per page"),
            Param("after", {"type": "string"}, "the next page: the keys after this one (the last page's `next`)"),
            Param("at_version", COUNT, "the next page: from the state of the first page (its `version`)"),
            Param("count_only", BOOLEAN, "only the count of the keys under `prefix`"),
            LOCAL,
            *TIMEOUTS,
        ),
        errors=(400, 410, 503),
        description="Linearizable unless `local`; a continuation reads the state of its listing's first page, "
        "or answers 410 once that state is no longer kept.",
    ),
    ("DELETE", "/_cluster/metadata"): Operation(
        "Delete every key under `prefix` (every key if it is empty) in one committed state.",
        t.PrefixDeleted,
        params=(Param("prefix", {"type": "string"}, "the keys to delete: those starting with this", True), *TIMEOUTS),
        errors=(400, 503),
    ),
    ("PUT", KEY): Operation(
        "Write a key (any JSON value), acknowledged once a quorum has committed it.",
        t.WriteAnswer,
        params=(
            *TIMEOUTS,
            IF_VERSION,
            Param("op_type", {"type": "string", "enum": ["index", "create"]}, "`create`: only if it does not exist"),
            Param("session", {"type": "string"}, "bind the key to this session: it ends with the session"),
            PREV_VALUE,
        ),
        body=Any,
        errors=(*WRITE_ERRORS, 404, 409),
    ),
    ("DELETE", KEY): Operation(
        "Delete a key (acknowledged even if it did not exist).",
        t.WriteAnswer,
        params=(*TIMEOUTS, IF_VERSION, PREV_VALUE),
        errors=(400, 409, 503),
    ),
    ("GET", KEY): Operation(
        "Read a key: linearizable, or this node's applied value with `local`.",
        t.KeyAnswer,
        params=(LOCAL, *TIMEOUTS),
        errors=(400, 404, 503),
    ),
    ("GET", "/_cluster/settings"): Operation(
        "The persistent cluster settings.",
        t.SettingsAnswer,
        params=(
            LOCAL,
            Param("include_defaults", BOOLEAN, "accepted and ignored"),
            Param("flat_settings", BOOLEAN, "accepted and ignored: settings are always flat"),
        ),
    ),
    ("PUT", "/_cluster/settings"): Operation(
        "Update persistent cluster settings (null resets one).",
        t.SettingsUpdated,
        params=(*TIMEOUTS, Param("flat_settings", BOOLEAN, "accepted and ignored")),
        body=t.SettingsBody,
        errors=WRITE_ERRORS,
    ),
    ("POST", "/_cluster/voting_config_exclusions"): Operation(
        "Exclude master-eligible nodes from the voting configuration (before removing them).",
        t.ExclusionsAnswer,
        params=(
            Param("node_names", {"type": "string"}, "comma-separated node names"),
            Param("node_ids", {"type": "string"}, "comma-separated node ids"),
            *TIMEOUTS,
        ),
        errors=(400, 503),
    ),
    ("DELETE", "/_cluster/voting_config_exclusions"): Operation(
        "Clear the voting-configuration exclusions.",
        t.ExclusionsAnswer,
        params=(Param("wait_for_removal", BOOLEAN, "only once the excluded nodes have left"), *TIMEOUTS),
        errors=(400, 503),
    ),
    ("POST", "/_sessions"): Operation(
        "Create a session: keys written with `session=ID` end with it.",
        t.SessionAnswer,
        status=201,
        params=TIMEOUTS,
        body=t.SessionBody,
        errors=WRITE_ERRORS,
    ),
    ("GET", "/_sessions"): Operation(
        "The sessions, with their ephemeral keys.",
        t.SessionsAnswer,
        params=(LOCAL, *TIMEOUTS),
        errors=(400, 503),
    ),
    ("PUT", "/_sessions/{id}/_keepalive"): Operation(
        "Keep a TTL session alive for another TTL.", t.SessionAnswer, params=TIMEOUTS, errors=(400, 404, 503)
    ),
    ("DELETE", "/_sessions/{id}"): Operation(
        "End a session and delete its keys.", t.Acknowledged, params=TIMEOUTS, errors=(400, 404, 503)
    ),
    ("GET", "/_history"): Operation(
        "This node's history events (the audit's input), one JSON object per line.",
        NdJson,
        params=(
            Param("after_seq", COUNT, "events after this sequence number"),
            Param("size", {**COUNT, "minimum": 1}, "at most this many events"),
        ),
    ),
    ("GET", "/metrics"): Operation("Prometheus metrics of this node.", Text),
    ("GET", "/healthz"): Operation("Liveness: 200 while the process serves requests.", t.Healthz, errors=()),
    ("GET", "/readyz"): Operation(
        "Readiness: 200 once this node has a master and no blocking problem, else 503 with the reason.",
        t.Readiness,
        errors=(),
        also=((503, "Not ready; `reason` says why."),),
    ),
    ("GET", "/_hooks"): Operation("The local hooks, with their delivery counts.", dict[str, t.HookAnswer]),
    ("PUT", "/_hooks/{name}"): Operation(
        "Register (201) or replace (200) a local hook: each applied state is posted to it.",
        t.HookPut,
        also=((201, "The hook was registered."),),
        body=HookSpec,
        errors=(400, 408, 413),
    ),
    ("DELETE", "/_hooks/{name}"): Operation("Remove a local hook.", t.Acknowledged, errors=(400, 404)),
    ("GET", "/_snapshot"): Operation(
        "Every snapshot repository.", dict[str, t.RepositoryAnswer], params=(LOCAL, MASTER_TIMEOUT), errors=(400, 503)
    ),
    ("GET", "/_snapshot/{repo}"): Operation(
        "One snapshot repository.",
        dict[str, t.RepositoryAnswer],
        params=(LOCAL, MASTER_TIMEOUT),
        errors=(400, 404, 503),
    ),
    ("PUT", "/_snapshot/{repo}"): REGISTER_REPOSITORY,
    ("POST", "/_snapshot/{repo}"): REGISTER_REPOSITORY,
    ("DELETE", "/_snapshot/{repo}"): Operation(
        "Unregister a snapshot repository (its files stay).", t.Acknowledged, params=TIMEOUTS, errors=(400, 404, 503)
    ),
    ("PUT", "/_snapshot/{repo}/{snap}"): TAKE_SNAPSHOT,
    ("POST", "/_snapshot/{repo}/{snap}"): TAKE_SNAPSHOT,
    ("GET", "/_snapshot/{repo}/{snap}"): Operation(
        "One snapshot, or every one with `_all` or `*`.",
        t.SnapshotsAnswer,
        params=(
            *TIMEOUTS,
            Param("ignore_unavailable", BOOLEAN, "accepted and ignored"),
            Param("verbose", BOOLEAN, "accepted and ignored"),
        ),
        errors=(400, 404, 500, 503),
    ),
    ("DELETE", "/_snapshot/{repo}/{snap}"): Operation(
        "Delete a snapshot's file.", t.Acknowledged, params=TIMEOUTS, errors=(400, 404, 503)
    ),
    ("POST", "/_snapshot/{repo}/{snap}/_restore"): Operation(
        "Replace the keys and persistent settings with a snapshot's, in one committed state.",
        t.RestoreAnswer,
        params=(WAIT_FOR_COMPLETION, *TIMEOUTS),
        body=t.RestoreBody,
        body_required=False,
        errors=(400, 404, 408, 413, 500, 503),
    ),
    ("GET", DOCUMENT_PATH): Operation("This document: the OpenAPI 3.1 description of the client API.", dict[str, Any]),
}

PATH_PARAMS = {
    "key": "the key; `/` may be written literally, and `%2F` is the same key as `/`",
    "id": "a session id",
    "name": "a hook name",
    "repo": "a snapshot repository name",
    "snap": "a snapshot name",
}


async def serve_document(request: web.Request) -> web.Response:
    return web.Response(body=document_bytes(), content_type=JSON)


def setup_document_route(router: web.UrlDispatcher) -> None:
    router.add_get(DOCUMENT_PATH, serve_document)


# The routes `client_app` adds to `api.setup_routes` on a node (`coordinated node` passes them).
EXTRA_ROUTES = (setup_snapshot_routes, setup_document_route)


def route_table() -> list[tuple[str, str]]:
    """Each (method, path template) a node's client app serves (HEAD aside)."""
    app = web.Application()
    setup_routes(app)
    for add_routes in EXTRA_ROUTES:
        add_routes(app.router)
    routes = []
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        template = info.get("formatter") or info.get("path")
        if route.method != "HEAD" and template is not None:
            routes.append((route.method, template))
    return routes


def _media(answer: Any) -> str:
    return {Text: "text/plain", NdJson: "application/x-ndjson"}.get(answer, JSON)


def _content(schema: dict[str, Any], media: str) -> dict[str, Any]:
    return {media: {"schema": schema}}


def _parameters(path: str, operation: Operation) -> list[dict[str, Any]]:
    in_path = [part[1:-1] for part in path.split("/") if part.startswith("{")]
    parameters: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "description": PATH_PARAMS[name], "schema": {"type": "string"}}
        for name in in_path
    ]
    for param in operation.params:
        parameter = {"name": param.name, "in": "query", "description": param.description, "schema": param.schema}
        parameters.append({**parameter, "required": True} if param.required else parameter)
    return parameters


def _responses(operation: Operation, role: Role, schema_of: dict[Any, dict[str, Any]]) -> dict[str, Any]:
    media = _media(operation.answer)
    answer_schema = _answer_schema(operation.answer, schema_of) if media == JSON else {"type": "string"}
    content = _content(answer_schema, media)
    if operation.or_text:
        content["text/plain"] = {"schema": {"type": "string"}}
    if operation.or_ndjson:
        content["application/x-ndjson"] = {"schema": {"type": "string"}}
    responses: dict[str, Any] = {str(operation.status): {"description": operation.summary, "content": content}}
    statuses = set(operation.errors)
    if role is not Role.OPEN:
        statuses |= {401, 403}
    for status in sorted(statuses):
        responses[str(status)] = {"$ref": f"#/components/responses/Error{status}"}
    for status, meaning in operation.also:
        responses[str(status)] = {"description": meaning, "content": _content(answer_schema, JSON)}
    return responses


def _answer_types(answer: Any) -> tuple[Any, ...]:
    return answer if isinstance(answer, tuple) else (answer,)


def _answer_schema(answer: Any, schema_of: dict[Any, dict[str, Any]]) -> dict[str, Any]:
    schemas = [schema_of[one] for one in _answer_types(answer)]
    return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}


def _operation(method: str, path: str, operation: Operation, schema_of: dict[Any, dict[str, Any]]) -> dict[str, Any]:
    role = required_role(method, path)
    out: dict[str, Any] = {
        "operationId": _operation_id(method, path),
        "summary": operation.summary,
        "x-required-role": role.name.lower() if role is not Role.OPEN else "none",
        "security": [] if role is Role.OPEN else [{"bearer": []}],
        "parameters": _parameters(path, operation),
        "responses": _responses(operation, role, schema_of),
    }
    if operation.description:
        out["description"] = operation.description
    if operation.body is not None:
        out["requestBody"] = {"required": operation.body_required, "content": _content(schema_of[operation.body], JSON)}
    return out


def _operation_id(method: str, path: str) -> str:
    words = [part.strip("{}_") for part in path.split("/") if part.strip("{}_")]
    return "_".join([method.lower(), *(words or ["root"])])


def build_document() -> dict[str, Any]:
    """The document; raises ValueError if the route table and `OPERATIONS` do not name the same routes."""
    routes = set(route_table())
    undocumented = sorted(routes - set(OPERATIONS))
    unserved = sorted(set(OPERATIONS) - routes)
    if undocumented or unserved:
        raise ValueError(f"routes without an entry in OPERATIONS: {undocumented}; entries without a route: {unserved}")
    types = sorted({op.body for op in OPERATIONS.values() if op.body is not None}, key=repr)
    answers = {one for op in OPERATIONS.values() if _media(op.answer) == JSON for one in _answer_types(op.answer)}
    types += sorted(answers, key=repr)
    types = [*dict.fromkeys([t.ErrorAnswer, *types])]
    schemas, components = msgspec.json.schema_components(types, ref_template="#/components/schemas/{name}")
    schema_of = dict(zip(types, schemas, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    for method, path in sorted(OPERATIONS, key=lambda route: (route[1], route[0])):
        paths.setdefault(path, {})[method.lower()] = _operation(method, path, OPERATIONS[(method, path)], schema_of)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "coordinated client API",
            "version": "1",
            "description": (
                "The client API of a coordinated node (docs/sidecar.md, docs/applications.md). Every node serves "
                "it; writes are forwarded to the master. With `http.auth.tokens_file` set, a request carries "
                "`Authorization: Bearer TOKEN` and each operation's `x-required-role` (reader < writer < admin) "
                "says which role it needs. Every parameter not listed is refused with a 400, except `pretty`, "
                "`human`, `error_trace` and `filter_path`, which are accepted and ignored (`GET /_cluster/state` "
                "applies `filter_path`)."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "responses": {
                f"Error{status}": {
                    "description": text,
                    "content": _content({"$ref": "#/components/schemas/ErrorAnswer"}, JSON),
                }
                for status, text in ERROR_TEXT.items()
            },
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


@functools.cache
def document_bytes() -> bytes:
    return render().encode()


def render() -> str:
    return json.dumps(build_document(), indent=2, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/openapi.json is out of date")
    parser.add_argument("--out", type=Path, default=DOC, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    text = render()
    current = args.out.read_text() if args.out.exists() else ""
    if current == text:
        return 0
    if args.check:
        print(f"{args.out} is out of date: run python -m coordinated.sidecar.web.openapi", file=sys.stderr)
        return 1
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
