"""The OpenAPI document of the client API: it names exactly the routes a node serves, with the roles the access
check enforces, the error shape the handlers send, and the node serves it at `GET /_openapi`."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
import schemathesis
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from route_lookup import required_role

from coordinated.coordination.client import error_body, version_conflict_error
from coordinated.sidecar.web import openapi
from coordinated.sidecar.web.access import Tokens, access_middleware
from coordinated.sidecar.web.api_types import ErrorAnswer
from coordinated.sidecar.web.app import ServedRoutes, served_routes
from coordinated.sidecar.web.app_keys import DOCUMENT_KEY
from coordinated.sidecar.web.privileges import Role
from coordinated.sidecar.web.route_table import ENDPOINTS

METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}


def operations(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, item in document["paths"].items() for method in item if method in METHODS}


def registered_app() -> web.Application:
    app = web.Application()
    ServedRoutes().register(app.router)
    return app


def test_every_route_of_the_app_is_documented_and_every_documented_path_is_served() -> None:
    document = openapi.build_document()
    served = served_routes(registered_app())
    assert len(served) == len(set(served))
    assert operations(document) == set(served)
    assert ("PUT", "/_cluster/metadata/{key}") in served and ("GET", "/_openapi") in served


def test_a_route_declared_twice_fails_the_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    hooks = next(endpoint for endpoint in ENDPOINTS if endpoint.route.path == "/_hooks/{name}")
    monkeypatch.setattr(openapi, "ENDPOINTS", (*ENDPOINTS, hooks))
    with pytest.raises(ValueError, match=r"declared more than once.*_hooks"):
        openapi.build_document()


def test_the_checked_in_document_is_current(tmp_path: Path) -> None:
    assert openapi.DOC.read_text() == openapi.render()
    stale = tmp_path / "openapi.json"
    stale.write_text("{}\n")
    assert openapi.main(["--check", "--out", str(stale)]) == 1
    assert openapi.main(["--out", str(stale)]) == 0
    assert openapi.main(["--check", "--out", str(stale)]) == 0


def test_roles_are_those_the_access_check_enforces() -> None:
    document = openapi.build_document()
    for method, path in operations(document):
        operation = document["paths"][path][method.lower()]
        role = required_role(method, re.sub(r"\{(\w+)\}", r"\1", path))  # a path the route serves
        assert operation["x-required-role"] == ("none" if role is Role.OPEN else role.name.lower()), (method, path)
        assert operation["security"] == ([] if role is Role.OPEN else [{"bearer": []}])
        if role is not Role.OPEN:
            assert {"401", "403"} <= set(operation["responses"]), (method, path)
    assert document["paths"]["/_openapi"]["get"]["x-required-role"] == "reader"
    assert document["paths"]["/_cluster/metadata/{key}"]["put"]["x-required-role"] == "writer"
    assert document["paths"]["/_cluster/settings"]["put"]["x-required-role"] == "admin"


def test_conflicts_and_unavailability_are_documented_with_the_error_shape() -> None:
    document = openapi.build_document()
    put = document["paths"]["/_cluster/metadata/{key}"]["put"]["responses"]
    assert put["409"] == {"$ref": "#/components/responses/Error409"}
    assert put["503"] == {"$ref": "#/components/responses/Error503"}
    responses = document["components"]["responses"]
    assert "version_conflict_engine_exception" in responses["Error409"]["description"]
    assert "may or may not take effect" in responses["Error503"]["description"]
    error_schema = responses["Error503"]["content"]["application/json"]["schema"]
    assert error_schema == {"$ref": "#/components/schemas/ErrorAnswer"}
    # The shape the handlers build is the documented one.
    conflict = version_conflict_error("k", 3, 4)
    assert msgspec.convert(conflict.to_api(), ErrorAnswer).error.type == "version_conflict_engine_exception"
    assert msgspec.convert(error_body("parse_exception", "bad", 400), ErrorAnswer).status == 400


def test_the_document_is_valid_openapi() -> None:
    schema = schemathesis.openapi.from_dict(openapi.build_document())
    assert len(list(schema.get_all_operations())) == sum(len(endpoint.route.method_list) for endpoint in ENDPOINTS)


def test_a_node_serves_the_document_to_a_reader(tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens"
    tokens_file.write_text(f"reader {'r' * 24}\n")
    asyncio.run(fetch_document(Tokens(str(tokens_file))))


async def fetch_document(tokens: Tokens) -> None:
    routes = ServedRoutes()
    app = web.Application(middlewares=[access_middleware(tokens, routes.privilege_of)])
    app[DOCUMENT_KEY] = openapi.document_bytes
    routes.register(app.router, [endpoint for endpoint in ENDPOINTS if endpoint.route.path == "/_openapi"])
    async with TestClient(TestServer(app)) as client:
        refused = await client.get("/_openapi")
        assert refused.status == 401
        served = await client.get("/_openapi", headers={"Authorization": f"Bearer {'r' * 24}"})
        assert served.status == 200
        assert served.content_type == "application/json"
        assert json.loads(await served.read()) == openapi.build_document()
