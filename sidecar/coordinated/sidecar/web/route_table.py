"""Every route of the client API: the declarations of the resource modules, in the order they are registered.
The registration (app.py) and the OpenAPI document (openapi.py) are made from this one table."""

from __future__ import annotations

from coordinated.sidecar.web import admin, cluster, keys, sessions, snapshots, watch
from coordinated.sidecar.web.routes import Endpoint

RESOURCES = (cluster, keys, watch, sessions, admin, snapshots)
ENDPOINTS: tuple[Endpoint, ...] = tuple(endpoint for module in RESOURCES for endpoint in module.routes.endpoints)
