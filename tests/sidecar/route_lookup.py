"""The role a request needs, found as the client app finds it: aiohttp's router resolves the request against the
registered routes, and the access check takes the privilege of the declaration that serves it."""

from __future__ import annotations

import asyncio

from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from coordinated.sidecar.web.app import ServedRoutes
from coordinated.sidecar.web.privileges import Role, role_for


def required_role(method: str, path: str) -> Role:
    app = web.Application()
    served = ServedRoutes()
    served.register(app.router)
    request = make_mocked_request(method, path, app=app)
    request._match_info = asyncio.run(app.router.resolve(request))  # as aiohttp sets it before the middlewares
    return role_for(served.privilege_of(request))
