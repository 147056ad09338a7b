"""Which event loop runs the node: libuv's (uvloop) or the standard library's."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import uvloop

from coordinated.coordination.settings import Settings, choice_setting

EVENT_LOOP = choice_setting(
    "node.event_loop",
    "uvloop",
    ("uvloop", "asyncio"),
    doc="`uvloop` (libuv's event loop) or `asyncio` (the standard library's); `python -m bench peers --ab node.event_loop=asyncio` measures what it saves",
)


def loop_factory(settings: Settings) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """For `asyncio.Runner`: None is the standard library's loop."""
    return uvloop.new_event_loop if settings[EVENT_LOOP] == "uvloop" else None
