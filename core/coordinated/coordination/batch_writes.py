"""One write per key per batch: the rule that gives every acknowledged write of a key its own version.

Every key a batch changes takes the batch's state version, so two writes of one key in one batch would both be
told "your write is version V" while V holds only the last one's value, and a compare-and-set on the first
writer's version would then overwrite the second write. The master therefore lets each key change at most once
per batch: a task that would change a key that an earlier task of the batch changed (put, delete, a
transaction's put, delete or delete_prefix, a prefix delete, a session's end deleting its ephemeral keys, a
restore) is left pending for the next publication, whole, as if it had come later. A transaction's ops on its
keys are one write. A task that would change a key that a task deferred before it would change waits too, so a
deferred task keeps its place ahead of later writes of its keys, and a restore (which changes every key) is
deferred behind any write of the batch and keeps every later write waiting. Writes of different keys still
share one publication.

Which keys a task writes is known before it runs for an unconditional put or delete of one key and for a restore
(their actions' `writes_keys`, requests/): such a task is deferred without running, even a delete of a key that
turns out missing.
Any other task runs against the state the batch builds, and the keys it changed (`BatchKeys.written_since`)
decide; if it must wait, its changes are taken back. So a task that changes nothing there (a refused
compare-and-set, a transaction that wrote nothing, a prefix with no key under it) is answered in this batch.

Pure data: no state of its own beyond one batch.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from enum import Enum
from typing import Final, Literal

from coordinated.coordination.tasks import ClientTask, ExpireSessions, TaskPayload


class EveryKey(Enum):
    """What a restore writes: every key, present or not."""

    EVERY_KEY = "every key"


EVERY_KEY: Final = EveryKey.EVERY_KEY
Writes = Collection[str] | Literal[EveryKey.EVERY_KEY]  # the keys a task changes


def deferrable(task: TaskPayload) -> bool:
    """The tasks that may wait for the next publication: clients' requests and session expiries. Membership tasks
    (elections, joins, departures, reconfigurations) always run: they change no key themselves, and the sessions
    of departed nodes end before any key is written in their batch (batch.py)."""
    return isinstance(task, ClientTask | ExpireSessions)


@dataclass
class WriteClaims:
    """The keys a batch has changed so far (`claimed`), and those that a task it deferred would change
    (`blocked`): a later task that changes any of them waits for the next publication."""

    claimed: set[str] = field(default_factory=set)
    blocked: set[str] = field(default_factory=set)
    every_claimed: bool = False  # a restore ran in this batch
    every_blocked: bool = False  # a restore waits for the next one

    def must_wait(self, writes: Writes) -> bool:
        if writes is EVERY_KEY:
            return bool(self.claimed or self.blocked or self.every_claimed or self.every_blocked)
        if not writes:
            return False
        if self.every_claimed or self.every_blocked:
            return True
        return any(key in self.claimed or key in self.blocked for key in writes)

    def take(self, writes: Writes) -> None:
        """A task of the batch changed these keys."""
        if writes is EVERY_KEY:
            self.every_claimed = True
        else:
            self.claimed.update(writes)

    def defer(self, writes: Writes) -> None:
        """A task that would change these keys waits for the next publication: later writes of them wait too."""
        if writes is EVERY_KEY:
            self.every_blocked = True
        else:
            self.blocked.update(writes)


class Deferred(Enum):
    """The result of a task that a batch left for the next publication (it did not run)."""

    DEFERRED = "deferred"


DEFERRED: Final = Deferred.DEFERRED
