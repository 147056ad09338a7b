"""One declaration per route of the client API, as Elasticsearch's `RestHandler.routes()`.

Each resource module (keys, watch, sessions, cluster, admin, snapshots) declares its routes on their handlers:

    routes = Routes()

    @routes.add(Route("DELETE", "/_hooks/{name}", "Remove a local hook.", Privilege.MANAGE, t.Acknowledged,
                      errors=(400, 404)))
    async def hook_delete(request: web.Request, query: Query) -> web.StreamResponse: ...

A `Route` holds every fact of the route: its methods, path, query parameters, the privilege it needs and where
the request names its keys, its body, answer and errors. Everything else is derived from the declarations
(route_table.py): the registration and the allowed-parameter check (app.py), the access rule (access.py, by
way of privileges.py) and the OpenAPI document (openapi.py). So a new endpoint is one handler and one
declaration.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from coordinated.sidecar.web.inputs import key_in_path
from coordinated.sidecar.web.privileges import Privilege, Role, role_for

Query = Mapping[str, str]  # the query, once its parameters are checked against the declaration
Handler = Callable[[web.Request, Query], Awaitable[web.StreamResponse]]
H = TypeVar("H", bound=Handler)

TIME_VALUE = {"type": "string", "pattern": r"^\s*\d+\s*(ms|s|m|h|d)\s*$", "examples": ["30s", "500ms"]}
BOOLEAN = {"type": "string", "enum": ["true", "false", ""]}  # `?local` alone, or `?local=`, means true
COUNT = {"type": "integer", "minimum": 0, "maximum": 9223372036854775807}


@dataclass(frozen=True)
class Param:
    """A query parameter: refused unless a route declares it; given at most once unless `repeatable`."""

    name: str
    schema: dict[str, Any]
    description: str
    required: bool = False
    repeatable: bool = False


@dataclass(frozen=True)
class PathParam:
    description: str
    pattern: str | None = None  # what the part matches, if not one path segment


# The path parameters, by the name routes give them in `{}`.
PATH_PARAMS = {
    "key": PathParam("the key; `/` may be written literally, and `%2F` is the same key as `/`", r"[\s\S]+"),
    "id": PathParam("a session id"),
    "name": PathParam("a hook name"),
    "repo": PathParam("a snapshot repository name"),
    "snap": PathParam("a snapshot name"),
}


class KeysFrom(enum.Enum):
    """Where a request names the keys its privilege applies to (for key privileges and per-prefix quotas)."""

    NONE = "none"  # no key in particular: a cluster privilege
    PATH = "path"  # the key in the path
    PREFIX = "prefix"  # every key under each `prefix` parameter (none given: every key)
    BODY = "body"  # the keys of the body: each op and compare of a transaction
    ALL = "all"  # every key


@dataclass(frozen=True)
class KeyTarget:
    name: str
    prefix: bool  # every key under `name` (`""`: every key), rather than the key `name` alone


def requested_keys(keys: KeysFrom, request: web.Request) -> tuple[KeyTarget, ...] | None:
    """The keys a request names, from where its route says (`keys`); None for the keys of a body, which the
    handler knows once it has decoded the body (the core request's keys)."""
    if keys is KeysFrom.NONE:
        return ()
    if keys is KeysFrom.PATH:
        return (KeyTarget(key_in_path(request), prefix=False),)
    if keys is KeysFrom.PREFIX:
        return tuple(KeyTarget(prefix, prefix=True) for prefix in request.query.getall("prefix", [""]))
    if keys is KeysFrom.ALL:
        return (KeyTarget("", prefix=True),)
    return None


class Text(msgspec.Struct):
    """A `text/plain` answer."""


class NdJson(msgspec.Struct):
    """An `application/x-ndjson` answer: one JSON object per line."""


@dataclass(frozen=True)
class Route:
    """Every fact of one route (or of one route under several methods, as Elasticsearch's PUT and POST of a
    repository). `answer` is the JSON answer's type (a tuple: one of them), or `Text` or `NdJson`."""

    methods: str | tuple[str, ...]
    path: str  # `{name}` for a path parameter of PATH_PARAMS
    summary: str
    privilege: Privilege
    answer: Any
    keys: KeysFrom = KeysFrom.NONE
    params: tuple[Param, ...] = ()
    check_params: bool = True  # False: any parameter is accepted and ignored (the probes, the document)
    body: Any = None  # the request body's type; None: the route takes no body
    body_required: bool = True
    status: int = 200
    errors: tuple[int, ...] = (400,)  # besides 401 and 403, which every route behind a token may answer
    also: tuple[tuple[int, str], ...] = ()  # other statuses answered with the answer's type, and what they mean
    description: str = ""
    or_text: bool = False  # the answer may also be `text/plain` (a format chosen by a parameter)
    or_ndjson: bool = False  # the answer may also be `application/x-ndjson` (a stream chosen by a parameter)

    @property
    def method_list(self) -> tuple[str, ...]:
        return (self.methods,) if isinstance(self.methods, str) else self.methods

    @property
    def role(self) -> Role:
        return role_for(self.privilege)

    @property
    def path_params(self) -> tuple[str, ...]:
        return tuple(part[1:-1] for part in self.path.split("/") if part.startswith("{"))

    @property
    def router_path(self) -> str:
        """The path as aiohttp's router takes it: a parameter's pattern, if it has one, written into it."""
        path = self.path
        for name in self.path_params:
            pattern = PATH_PARAMS[name].pattern
            if pattern is not None:
                path = path.replace(f"{{{name}}}", f"{{{name}:{pattern}}}")
        return path


@dataclass(frozen=True)
class Endpoint:
    route: Route
    handler: Handler


class Routes:
    """The routes a resource module declares, in its order."""

    def __init__(self) -> None:
        self.endpoints: list[Endpoint] = []

    def add(self, route: Route) -> Callable[[H], H]:
        def declare(handler: H) -> H:
            self.endpoints.append(Endpoint(route, handler))
            return handler

        return declare


# Parameters that several routes share.
TIMEOUT = Param("timeout", TIME_VALUE, "how long to wait for the master to answer; default 30s, at most 1h")
MASTER_TIMEOUT = Param("master_timeout", TIME_VALUE, "another name of `timeout` (give only one of them)")
TIMEOUTS = (TIMEOUT, MASTER_TIMEOUT)
LOCAL = Param("local", BOOLEAN, "answer from this node's applied state at once, without asking the master")
WRITE_ERRORS = (400, 408, 413, 503)
