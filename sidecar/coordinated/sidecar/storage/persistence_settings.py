"""`persistence.sync`: where the durable store's fsync runs (`group_commit`)."""

from __future__ import annotations

from enum import StrEnum

from coordinated.coordination.settings import enum_setting


class PersistenceSync(StrEnum):
    BACKGROUND = "background"  # in a worker thread, with group commit
    INLINE = "inline"  # on the event loop


# Measured slower on a 2-core machine with a fast disk (`python -m bench peers --ab persistence.sync=background`),
# hence `inline` by default.
PERSISTENCE_SYNC = enum_setting(
    "persistence.sync",
    PersistenceSync.INLINE,
    doc="where the durable store's fsync runs: `inline` (on the event loop; each term or accepted-state write is "
    "durable when it returns) or `background` (a worker thread with group commit: every message, reply and apply "
    "that follows a write waits for one fsync covering it; a failed fsync silences the node until it is "
    "restarted); `python -m bench peers --ab persistence.sync=background` is the A/B",
)
