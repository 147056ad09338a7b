"""The OpenAPI 3.1 document of the client API, generated from the route table and the typed bodies.

Every route of the client app is one declaration (routes.py, collected in route_table.py): its parameters, the
privilege and so the role it needs, its body and answer types (`api_types`, turned into JSON Schema by
msgspec) and the errors it may answer. The document is made from those declarations alone, so it names
exactly the routes a node serves. The node serves it at `GET /_openapi`; a copy is checked in as
docs/openapi.json:

    python -m coordinated.sidecar.web.openapi            # rewrite docs/openapi.json
    python -m coordinated.sidecar.web.openapi --check    # exit 1 when it is out of date (`make lint` runs it)
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

import click
import msgspec

from coordinated.programs import run_program
from coordinated.sidecar.web import api_types as t
from coordinated.sidecar.web.privileges import Role
from coordinated.sidecar.web.route_table import ENDPOINTS
from coordinated.sidecar.web.routes import PATH_PARAMS, NdJson, Route, Text

REPO = Path(__file__).resolve().parents[4]
DOC = REPO / "docs" / "openapi.json"
JSON = "application/json"

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


def _media(answer: Any) -> str:
    return {Text: "text/plain", NdJson: "application/x-ndjson"}.get(answer, JSON)


def _content(schema: dict[str, Any], media: str) -> dict[str, Any]:
    return {media: {"schema": schema}}


def _parameters(operation: Route) -> list[dict[str, Any]]:
    parameters: list[dict[str, Any]] = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "description": PATH_PARAMS[name].description,
            "schema": {"type": "string"},
        }
        for name in operation.path_params
    ]
    for param in operation.params:
        # A repeatable parameter is an array, sent as `name=a&name=b` (OpenAPI's default form style).
        schema = {"type": "array", "items": param.schema} if param.repeatable else param.schema
        parameter = {"name": param.name, "in": "query", "description": param.description, "schema": schema}
        parameters.append({**parameter, "required": True} if param.required else parameter)
    return parameters


def _responses(operation: Route, role: Role, schema_of: dict[Any, dict[str, Any]]) -> dict[str, Any]:
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


def _operation(method: str, operation: Route, schema_of: dict[Any, dict[str, Any]]) -> dict[str, Any]:
    role = operation.role
    out: dict[str, Any] = {
        "operationId": _operation_id(method, operation.path),
        "summary": operation.summary,
        "x-required-role": role.name.lower() if role is not Role.OPEN else "none",
        "security": [] if role is Role.OPEN else [{"bearer": []}],
        "parameters": _parameters(operation),
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
    """The document of every declared route; raises ValueError if a route is declared twice."""
    operations = {
        (method, endpoint.route.path): endpoint.route for endpoint in ENDPOINTS for method in endpoint.route.method_list
    }
    types = sorted({op.body for op in operations.values() if op.body is not None}, key=repr)
    answers = {one for op in operations.values() if _media(op.answer) == JSON for one in _answer_types(op.answer)}
    types += sorted(answers, key=repr)
    types = [*dict.fromkeys([t.ErrorAnswer, *types])]
    schemas, components = msgspec.json.schema_components(types, ref_template="#/components/schemas/{name}")
    schema_of = dict(zip(types, schemas, strict=True))
    declared = [(method, endpoint.route.path) for endpoint in ENDPOINTS for method in endpoint.route.method_list]
    twice = sorted({route for route in declared if declared.count(route) > 1})
    if twice:
        raise ValueError(f"routes declared more than once: {twice}")
    paths: dict[str, dict[str, Any]] = {}
    for method, path in sorted(operations, key=lambda route: (route[1], route[0])):
        paths.setdefault(path, {})[method.lower()] = _operation(method, operations[(method, path)], schema_of)
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


@click.command(help=__doc__.splitlines()[0] if __doc__ else None)
@click.option("--check", is_flag=True, help="exit 1 if docs/openapi.json is out of date")
@click.option("--out", type=click.Path(path_type=Path), default=DOC, hidden=True)
def generate(check: bool, out: Path) -> int:
    text = render()
    current = out.read_text() if out.exists() else ""
    if current == text:
        return 0
    if check:
        print(f"{out} is out of date: run python -m coordinated.sidecar.web.openapi", file=sys.stderr)
        return 1
    out.write_text(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_program(generate, argv, "python -m coordinated.sidecar.web.openapi")


if __name__ == "__main__":
    sys.exit(main())
