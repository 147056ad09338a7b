"""What the client app holds for its handlers: the node they serve, and the API's OpenAPI document."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from coordinated.sidecar.node import Node

NODE_KEY: web.AppKey[Node] = web.AppKey("node", Node)


def node_of(request: web.Request) -> Node:
    return request.app[NODE_KEY]


# The OpenAPI document's bytes, made on first use (openapi.py builds it from the route table).
DOCUMENT_KEY: web.AppKey[Callable[[], bytes]] = web.AppKey("openapi_document")
