"""The client app: every declared route registered with the check of its query parameters, the access check
from its declared privilege, and the errors middleware.

The registration wraps each handler so that its query is checked against the route's declared parameters
(unknown parameters are refused, as Elasticsearch does, and only repeatable ones may repeat) before the handler
runs, and keeps which declaration each registered handler serves, for the access check: a request that no
route serves (aiohttp's 404 or 405) needs what `admin` holds.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web

from coordinated.sidecar.auth.authenticators import Authentication
from coordinated.sidecar.node import Node
from coordinated.sidecar.web.access import access_middleware
from coordinated.sidecar.web.app_keys import DOCUMENT_KEY, NODE_KEY
from coordinated.sidecar.web.errors import errors_middleware
from coordinated.sidecar.web.http_settings import MAX_CONTENT_LENGTH
from coordinated.sidecar.web.inputs import NO_PARAMS, check_params
from coordinated.sidecar.web.openapi import document_bytes
from coordinated.sidecar.web.privileges import Privilege
from coordinated.sidecar.web.route_table import ENDPOINTS
from coordinated.sidecar.web.routes import Endpoint

RequestHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _checked(endpoint: Endpoint) -> RequestHandler:
    """The handler as aiohttp calls it: given the query once its parameters are checked against the route's."""
    route, handler = endpoint.route, endpoint.handler
    if not route.check_params:

        async def unchecked(request: web.Request) -> web.StreamResponse:
            return await handler(request, NO_PARAMS)

        return unchecked
    allowed = frozenset(param.name for param in route.params)
    repeatable = frozenset(param.name for param in route.params if param.repeatable)

    async def checked(request: web.Request) -> web.StreamResponse:
        return await handler(request, check_params(request, allowed, repeatable))

    return checked


class ServedRoutes:
    """The declarations an app serves, found from the handler aiohttp matched for a request."""

    def __init__(self) -> None:
        self._by_handler: dict[RequestHandler, Endpoint] = {}

    def register(self, router: web.UrlDispatcher, endpoints: Iterable[Endpoint] = ENDPOINTS) -> None:
        for endpoint in endpoints:
            wrapped = _checked(endpoint)
            self._by_handler[wrapped] = endpoint
            for method in endpoint.route.method_list:
                if method == "GET":
                    router.add_get(endpoint.route.router_path, wrapped)  # and HEAD
                else:
                    router.add_route(method, endpoint.route.router_path, wrapped)

    def endpoint_of(self, request: web.Request) -> Endpoint | None:
        return self._by_handler.get(request.match_info.handler)

    def privilege_of(self, request: web.Request) -> Privilege:
        endpoint = self.endpoint_of(request)
        return Privilege.MANAGE if endpoint is None else endpoint.route.privilege


def client_app(node: Node, authentication: Authentication | None = None) -> web.Application:
    """With `authentication`, every request is authenticated and checked (before its body is read) by the access
    middleware."""
    served = ServedRoutes()
    middlewares: list[Callable[..., Awaitable[web.StreamResponse]]] = [errors_middleware]
    if authentication is not None:
        middleware = access_middleware(
            authentication, served.endpoint_of, served.privilege_of, node.permissions, node.metrics.count_request
        )
        middlewares.insert(0, middleware)
    app = web.Application(client_max_size=node.status().settings[MAX_CONTENT_LENGTH], middlewares=middlewares)
    app[NODE_KEY] = node
    document: Callable[[], bytes] = document_bytes
    app[DOCUMENT_KEY] = document
    served.register(app.router)

    async def end_waits(app: web.Application) -> None:
        # Before the server waits for its open requests to finish: streaming watches and long-polls end now, or
        # a node with a watcher connected would take the server's whole shutdown timeout to stop.
        node.keys.close()

    app.on_shutdown.append(end_waits)
    return app


def served_routes(app: web.Application) -> list[tuple[str, str]]:
    """Each (method, path template) an app serves (HEAD aside)."""
    routes = []
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        template = info.get("formatter") or info.get("path")
        if route.method != "HEAD" and template is not None:
            routes.append((route.method, template))
    return routes
