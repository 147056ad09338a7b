"""The OpenAPI document of the client API: it names exactly the routes a node serves, with the roles of the
access table, the error shape the handlers send, and the node serves it at `GET /_openapi`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
import schemathesis
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from coordinated.coordination.client import error_body, version_conflict_error
from coordinated.sidecar.web import openapi
from coordinated.sidecar.web.access import Role, Tokens, access_middleware, required_role
from coordinated.sidecar.web.api_types import ErrorAnswer

METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}


def operations(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, item in document["paths"].items() for method in item if method in METHODS}


def test_every_route_of_the_app_is_documented_and_every_documented_path_is_served() -> None:
    document = openapi.build_document()
    served = set(openapi.route_table())
    assert operations(document) == served
    assert ("PUT", "/_cluster/metadata/{key}") in served and ("GET", "/_openapi") in served


def test_a_route_without_an_entry_fails_the_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    entries = dict(openapi.OPERATIONS)
    del entries[("DELETE", "/_hooks/{name}")]
    monkeypatch.setattr(openapi, "OPERATIONS", entries)
    with pytest.raises(ValueError, match=r"routes without an entry.*_hooks"):
        openapi.build_document()


def test_an_entry_without_a_route_fails_the_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    entries = {**openapi.OPERATIONS, ("GET", "/_nowhere"): openapi.OPERATIONS[("GET", "/healthz")]}
    monkeypatch.setattr(openapi, "OPERATIONS", entries)
    with pytest.raises(ValueError, match=r"entries without a route.*_nowhere"):
        openapi.build_document()


def test_the_checked_in_document_is_current(tmp_path: Path) -> None:
    assert openapi.DOC.read_text() == openapi.render()
    stale = tmp_path / "openapi.json"
    stale.write_text("{}\n")
    assert openapi.main(["--check", "--out", str(stale)]) == 1
    assert openapi.main(["--out", str(stale)]) == 0
    assert openapi.main(["--check", "--out", str(stale)]) == 0


def test_roles_are_those_of_the_access_table() -> None:
    document = openapi.build_document()
    for method, path in operations(document):
        operation = document["paths"][path][method.lower()]
        role = required_role(method, path)
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
    assert len(list(schema.get_all_operations())) == len(openapi.OPERATIONS)


def test_a_node_serves_the_document_to_a_reader(tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens"
    tokens_file.write_text(f"reader {'r' * 24}\n")
    asyncio.run(fetch_document(Tokens(str(tokens_file))))


async def fetch_document(tokens: Tokens) -> None:
    app = web.Application(middlewares=[access_middleware(tokens)])
    openapi.setup_document_route(app.router)
    async with TestClient(TestServer(app)) as client:
        refused = await client.get(openapi.DOCUMENT_PATH)
        assert refused.status == 401
        served = await client.get(openapi.DOCUMENT_PATH, headers={"Authorization": f"Bearer {'r' * 24}"})
        assert served.status == 200
        assert served.content_type == "application/json"
        assert json.loads(await served.read()) == openapi.build_document()
