"""Which event loop runs the node: libuv's (uvloop) or the standard library's."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import uvloop

from coordinated.coordination.settings import Settings
from coordinated.sidecar.event_loop_settings import EVENT_LOOP, EventLoop


def loop_factory(settings: Settings) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """For `asyncio.Runner`: None is the standard library's loop."""
    return uvloop.new_event_loop if settings[EVENT_LOOP] is EventLoop.UVLOOP else None
