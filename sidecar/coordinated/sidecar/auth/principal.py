"""The principal of the client request whose handler runs in this task: the access middleware sets it, and the node
sends it with every request it submits to the core, so that the master authorizes the request too."""

from __future__ import annotations

import contextvars

from coordinated.coordination.client import Principal

CURRENT_PRINCIPAL: contextvars.ContextVar[Principal | None] = contextvars.ContextVar("principal", default=None)
