"""Group commit: the durable writes of the node's store are synced off the event loop, and whatever the core
decided after a write leaves the node only once that write is durable.

The core writes its term and accepted state synchronously, as the protocol requires ("on disk before the Join
or the publish ack is sent"). With a store that commits without waiting for the disk (`state_store`'s
`deferred_sync`), the write itself is quick and the wait moves here: the effects of every core call that
follows a write not yet synced (its messages, client replies, applied states, history lines) are held, in
order, until a sync that started after that write returns. One sync runs at a time, in a worker thread, and
covers every write committed before it started, so writes that pile up while the disk is busy share the next
one; meanwhile the event loop reads requests and messages and runs the core.

Holding every later effect, not only those that name the written state, keeps the rule simple and obviously
safe: nothing this node says after a write can be seen before the write is durable, exactly as when the write
itself blocked. A sync that fails stops the node from speaking: held effects are dropped, the store refuses
every later write (health reports it), and the node must be restarted, because which of its writes reached the
disk is unknown (`state_store`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Protocol

from coordinated.coordination.effects import Effect

log = logging.getLogger("coordinated.node")


class SyncedStore(Protocol):
    @property
    def staged(self) -> int: ...  # writes committed so far

    @property
    def synced(self) -> int: ...  # of those, the ones known to be durable

    def sync(self) -> None: ...  # makes every write committed before the call durable; raises OSError


class GroupCommit:
    """Runs each core call's effects through `execute`, at once when every write before them is durable,
    otherwise once it is."""

    def __init__(
        self, store: SyncedStore, execute: Callable[[list[Effect]], None], on_failure: Callable[[str], None]
    ) -> None:
        self.store = store
        self.execute = execute
        self.on_failure = on_failure
        self._held: deque[tuple[int, list[Effect]]] = deque()  # (writes that must be durable first, effects)
        self._syncing: asyncio.Task[None] | None = None
        self.failure: str | None = None
        self.held_batches = 0  # how many effect lists had to wait (for metrics and tests)
        self.closed = False

    def submit(self, effects: list[Effect]) -> None:
        if self.failure is not None or self.closed:
            return  # a failed sync: this node no longer speaks (see the module's docstring)
        needed = self.store.staged
        if not self._held and needed <= self.store.synced:
            self.execute(effects)
            return
        self.held_batches += 1
        self._held.append((needed, effects))
        self._start_sync()

    def close(self) -> None:
        """Drops what is held and carries out nothing more; a running sync is left to finish (see `drain`)."""
        self.closed = True
        self._held.clear()

    async def drain(self) -> None:
        """Returns once nothing is held and no sync runs (or a sync failed, or `close` dropped what was held)."""
        while self._syncing is not None:
            await asyncio.shield(self._syncing)

    def _start_sync(self) -> None:
        if self._syncing is None and self._held and self.failure is None:
            self._syncing = asyncio.get_running_loop().create_task(self._sync())

    async def _sync(self) -> None:
        try:
            await asyncio.to_thread(self.store.sync)
        except OSError as error:
            self.failure = f"cannot make the coordination state durable: {error}"
            dropped = sum(len(effects) for _, effects in self._held)
            self._held.clear()
            log.error(
                "%s; %d held effects dropped, this node stays silent until it is restarted", self.failure, dropped
            )
            self.on_failure(self.failure)
            return
        finally:
            self._syncing = None
        synced = self.store.synced
        while self._held and self._held[0][0] <= synced:
            _, effects = self._held.popleft()
            try:
                self.execute(effects)
            except Exception:
                log.exception("failed to carry out effects held for a sync")
        self._start_sync()
