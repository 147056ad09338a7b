"""`PrefixCache` and `AsyncPrefixCache`: a local copy of every key under a prefix, kept up to date, as
Curator's `CuratorCache` keeps one of a ZooKeeper subtree. Written once as a flow (`maintain`).

The cache lists the prefix (a range read, all pages at one version V), then follows a streaming watch from
V. The watch resumes by itself after a dropped connection or a failover, so the copy goes on without a gap.
If the watch falls behind a node's change log (a reset), or the cluster cannot be reached for longer than
the client's `retry_timeout`, the cache lists the prefix again and reports the differences, so the copy
is again the prefix as of one version. At any moment the copy is the prefix as it was at `version`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from coordinated.client import operations
from coordinated.client.aio import AsyncClient
from coordinated.client.base import ClientBase
from coordinated.client.errors import CoordinatedError
from coordinated.client.flow import Emit, Sleep, Stream, next_item
from coordinated.client.models import KeyValue, Listing, WatchEvent
from coordinated.client.sync import Client

log = logging.getLogger("coordinated.client")

C = TypeVar("C", bound=ClientBase)
# How long the cache waits before listing again after it could not reach the cluster.
RETRY_PAUSE_S = 1.0


@dataclass(frozen=True)
class CacheChange:
    """One change of the copy: `added` (`new`), `changed` (`old` and `new`), `removed` (`old`), or
    `initialized` once the first listing is in the copy (no key)."""

    type: Literal["added", "changed", "removed", "initialized"]
    key: str
    old: KeyValue | None
    new: KeyValue | None
    version: int  # the version the copy is at after this change


Listener = Callable[[CacheChange], None]


class PrefixCacheBase(Generic[C]):
    """The copy and its listeners; `PrefixCache` and `AsyncPrefixCache` keep it up to date."""

    def __init__(self, client: C, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        self.version: int | None = None  # the copy is the prefix as it was at this version
        self._entries: dict[str, KeyValue] = {}
        self._listeners: list[Listener] = []

    def listen(self, listener: Listener) -> None:
        """Calls `listener` with every change of the copy, from the driver's thread or task."""
        self._listeners.append(listener)

    def get(self, key: str) -> KeyValue | None:
        return self._entries.get(key)

    def entries(self) -> dict[str, KeyValue]:
        """A copy of the copy: key -> `KeyValue` (a key's `session` is known only from a listing)."""
        return dict(self._entries)

    def values(self) -> dict[str, Any]:
        return {key: kv.value for key, kv in self._entries.items()}

    def __len__(self) -> int:
        return len(self._entries)

    def notify(self, change: CacheChange) -> None:
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception:  # a listener's bug must not stop the cache
                log.exception("a listener of the prefix cache of %r failed on %s", self.prefix, change)

    def replace(self, listing: Listing) -> list[CacheChange]:
        """The copy becomes the listing; the changes that makes."""
        version = listing.version
        listed = {kv.key: kv for kv in listing.keys}
        changes = [
            CacheChange("removed", key, old, None, version) for key, old in self._entries.items() if key not in listed
        ]
        for key, new in listed.items():
            old = self._entries.get(key)
            if old is None:
                changes.append(CacheChange("added", key, None, new, version))
            elif (old.value, old.version) != (new.value, new.version):
                changes.append(CacheChange("changed", key, old, new, version))
        self._entries, self.version = listed, version
        return changes

    def apply(self, event: WatchEvent) -> CacheChange | None:
        """A watch event into the copy; the change it makes (None for the delete of a key not there)."""
        old = self._entries.get(event.key)
        self.version = event.version
        if event.type == "delete":
            if old is None:
                return None
            del self._entries[event.key]
            return CacheChange("removed", event.key, old, None, event.version)
        create_version = event.version if old is None else old.create_version
        session = None if old is None else old.session
        new = KeyValue(event.key, event.value, event.version, create_version, session)
        self._entries[event.key] = new
        return CacheChange("added" if old is None else "changed", event.key, old, new, event.version)


def maintain(cache: PrefixCacheBase[Any]) -> Stream[CacheChange]:
    """Keeps the copy up to date for ever, emitting each change after it is made."""
    client, initialized = cache.client, False
    while True:
        try:
            listing = yield from operations.list_prefix(client, cache.prefix)
        except CoordinatedError as error:
            log.warning("the prefix cache of %r could not list it: %s", cache.prefix, error)
            yield Sleep(RETRY_PAUSE_S)
            continue
        for difference in cache.replace(listing):
            yield Emit(difference)
        if not initialized:
            initialized = True
            yield Emit(CacheChange("initialized", "", None, None, listing.version))
        events = operations.watch(client, cache.prefix, listing.version)
        try:
            while True:
                event = yield from next_item(events)
                if event.type == "reset":  # the watch fell behind: list again, which reports the differences
                    break
                change = cache.apply(event)
                if change is not None:
                    yield Emit(change)
        except CoordinatedError as error:
            log.warning("the watch of the prefix cache of %r failed: %s", cache.prefix, error)
            yield Sleep(RETRY_PAUSE_S)
        finally:
            events.close()


class PrefixCache(PrefixCacheBase[Client]):
    """A copy of the keys under `prefix` that a daemon thread keeps up to date from `start()` to `close()`
    (or a `with` block). `initialized` is set once the first listing is in the copy."""

    def __init__(self, client: Client, prefix: str) -> None:
        super().__init__(client, prefix)
        self.initialized = threading.Event()
        self._closed = threading.Event()
        self._changes = client.iterate_flow(maintain(self))
        self._thread = threading.Thread(target=self._run, name=f"prefix-cache-{prefix}", daemon=True)

    def start(self) -> PrefixCache:
        self._thread.start()
        return self

    def _run(self) -> None:
        for change in self._changes:
            if self._closed.is_set():
                return
            if change.type == "initialized":
                self.initialized.set()
            self.notify(change)

    def wait_initialized(self, timeout: float | None = None) -> bool:
        return self.initialized.wait(timeout)

    def close(self) -> None:
        """Stops following the prefix: the thread sends nothing more and calls no listener once a change
        being notified is done; its stream is closed at once."""
        self._closed.set()
        self._changes.close()

    def __enter__(self) -> PrefixCache:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncPrefixCache(PrefixCacheBase[AsyncClient]):
    """A copy of the keys under `prefix` that a task keeps up to date from `start()` to `aclose()` (or an
    `async with` block). `initialized` is set once the first listing is in the copy."""

    def __init__(self, client: AsyncClient, prefix: str) -> None:
        super().__init__(client, prefix)
        self.initialized = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> AsyncPrefixCache:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"prefix-cache-{self.prefix}")
        return self

    async def _run(self) -> None:
        async for change in self.client.iterate_flow(maintain(self)):
            if change.type == "initialized":
                self.initialized.set()
            self.notify(change)

    async def wait_initialized(self, timeout: float | None = None) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.initialized.wait(), timeout)
        return self.initialized.is_set()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def __aenter__(self) -> AsyncPrefixCache:
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
