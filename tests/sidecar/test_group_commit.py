"""Group commit: effects that follow a write leave only once a sync after that write returned; writes that pile up
during a sync share the next one; a failed sync silences the node. With fake stores and with the real one."""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from coordinated.coordination.effects import Effect, Log
from coordinated.coordination.state import initial_state
from coordinated.sidecar.events.history_read import read_history_summary
from coordinated.sidecar.storage.group_commit import GroupCommit
from coordinated.sidecar.storage.persistence import FilePersistedState
from coordinated.sidecar.storage.state_store import StorageWriteError


class FakeStore:
    """Writes are counted; `sync` blocks (in its worker thread) until the test lets it through."""

    def __init__(self) -> None:
        self.staged = 0
        self.synced = 0
        self.syncs = 0
        self.gate = threading.Semaphore(0)
        self.fail: OSError | None = None

    def write(self) -> None:
        self.staged += 1

    def sync(self) -> None:
        covered = self.staged
        assert self.gate.acquire(timeout=10), "the test never let the sync through"
        if self.fail is not None:
            raise self.fail
        self.syncs += 1
        self.synced = max(self.synced, covered)


def effects(name: str) -> list[Effect]:
    return [Log("info", name)]


def names(executed: list[list[Effect]]) -> list[str]:
    return [effect.message for batch in executed for effect in batch if isinstance(effect, Log)]


async def settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0.01)


def run(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Runs an async test on its own event loop (the suite has no asyncio plugin)."""

    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(asyncio.wait_for(test(*args, **kwargs), 30))

    return wrapper


def make(store: FakeStore) -> tuple[GroupCommit, list[list[Effect]], list[str]]:
    executed: list[list[Effect]] = []
    failures: list[str] = []
    return GroupCommit(store, executed.append, failures.append), executed, failures


@run
async def test_effects_without_an_unsynced_write_run_at_once() -> None:
    store = FakeStore()
    gate, executed, _ = make(store)
    gate.submit(effects("a"))
    assert names(executed) == ["a"]
    assert store.syncs == 0 and gate.held_batches == 0


@run
async def test_effects_after_a_write_wait_for_its_sync_and_keep_their_order() -> None:
    store = FakeStore()
    gate, executed, _ = make(store)
    store.write()
    gate.submit(effects("ack"))
    gate.submit(effects("later, no write of its own"))  # behind the held batch, never before it
    await settle()
    assert executed == []
    store.gate.release()
    await gate.drain()
    assert names(executed) == ["ack", "later, no write of its own"]
    assert store.syncs == 1


@run
async def test_writes_during_a_sync_share_the_next_sync() -> None:
    store = FakeStore()
    gate, executed, _ = make(store)
    store.write()
    gate.submit(effects("first"))
    await settle()  # the first sync is running (blocked) and covers one write
    for name in ("second", "third", "fourth"):
        store.write()
        gate.submit(effects(name))
    store.gate.release()  # the first sync returns: only "first" may leave
    await settle()
    assert names(executed) == ["first"]
    store.gate.release()  # one more sync covers the three writes made meanwhile
    await gate.drain()
    assert names(executed) == ["first", "second", "third", "fourth"]
    assert store.syncs == 2


@run
async def test_a_failed_sync_drops_what_is_held_and_silences_the_node() -> None:
    store = FakeStore()
    gate, executed, failures = make(store)
    store.write()
    gate.submit(effects("ack"))
    store.fail = OSError(5, "Input/output error")
    store.gate.release()
    await gate.drain()
    gate.submit(effects("anything later"))
    assert executed == []
    assert failures and "Input/output error" in failures[0]


@run
async def test_close_drops_what_is_held() -> None:
    store = FakeStore()
    gate, executed, _ = make(store)
    store.write()
    gate.submit(effects("ack"))
    await settle()
    gate.close()
    store.gate.release()
    await gate.drain()
    assert executed == []


@run
async def test_the_real_store_holds_an_effect_until_its_fdatasync_returned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the node's store (deferred sync), the effect that follows an accepted state is carried out only
    after an fdatasync of the WAL that started after the commit."""
    persisted = FilePersistedState(tmp_path, "c", deferred_sync=True, read_history=read_history_summary)
    release = threading.Event()
    synced_fds: list[int] = []
    real_fdatasync = os.fdatasync

    def slow_fdatasync(fd: int) -> None:
        assert release.wait(10)
        synced_fds.append(fd)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
    executed: list[list[Effect]] = []
    gate = GroupCommit(persisted, executed.append, lambda reason: None)
    try:
        state = initial_state("c").replace(version=1, state_uuid="v1", kv={"k": 1})
        persisted.set_last_accepted_state(state)
        assert (persisted.staged, persisted.synced) == (1, 0)
        gate.submit(effects("publish ack"))
        await settle()
        assert executed == [] and synced_fds == []
        release.set()
        await gate.drain()
        assert names(executed) == ["publish ack"]
        assert len(synced_fds) == 1 and os.path.samefile(
            f"/proc/self/fd/{synced_fds[0]}", persisted.path.with_name(persisted.path.name + "-wal")
        )
        assert persisted.synced == 1
    finally:
        release.set()
        await gate.drain()
        persisted.close()
    again = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    try:
        assert dict(again.last_accepted_state.kv) == {"k": 1}
    finally:
        again.close()


def test_a_failed_sync_makes_the_store_refuse_every_later_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    persisted = FilePersistedState(tmp_path, "c", deferred_sync=True, read_history=read_history_summary)
    try:
        persisted.set_current_term(3)

        def broken(fd: int) -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(os, "fdatasync", broken)
        with pytest.raises(StorageWriteError, match="Input/output error"):
            persisted.sync()
        monkeypatch.undo()
        with pytest.raises(StorageWriteError, match="an earlier sync failed"):
            persisted.set_current_term(4)
        assert persisted.current_term == 3
    finally:
        persisted.close()


def test_the_inline_store_is_durable_when_the_write_returns(tmp_path: Path) -> None:
    persisted = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    try:
        persisted.set_current_term(2)
        assert (persisted.staged, persisted.synced) == (1, 1)
        assert persisted._open_store().conn.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
    finally:
        persisted.close()
