"""`node.event_loop`: which event loop runs the node (`event_loop`)."""

from __future__ import annotations

from coordinated.coordination.settings import choice_setting

EVENT_LOOP = choice_setting(
    "node.event_loop",
    "uvloop",
    ("uvloop", "asyncio"),
    doc="`uvloop` (libuv's event loop) or `asyncio` (the standard library's); `python -m bench peers --ab node.event_loop=asyncio` measures what it saves",
)
