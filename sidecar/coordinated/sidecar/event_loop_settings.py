"""`node.event_loop`: which event loop runs the node (`event_loop`)."""

from __future__ import annotations

from enum import StrEnum

from coordinated.coordination.settings import enum_setting


class EventLoop(StrEnum):
    UVLOOP = "uvloop"  # libuv's
    ASYNCIO = "asyncio"  # the standard library's


EVENT_LOOP = enum_setting(
    "node.event_loop",
    EventLoop.UVLOOP,
    doc="`uvloop` (libuv's event loop) or `asyncio` (the standard library's); `python -m bench peers --ab node.event_loop=asyncio` measures what it saves",
)
