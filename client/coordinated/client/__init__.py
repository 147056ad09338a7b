"""`coordinated.client`: a Python client for applications, blocking (`Client`) and asyncio (`AsyncClient`),
with the `Lock` and `LeaderElection` recipes and their fencing tokens. See docs/applications.md.

The names are imported when first used (PEP 562), so that a program that needs only the blocking client
(the `coordinated` command line, a short script) does not pay for asyncio, the recipes or the package
metadata at start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coordinated.client.aio import AsyncClient, AsyncSession
    from coordinated.client.calls import delete_op, delete_prefix_op, get_op, put_op
    from coordinated.client.errors import (
        ApiError,
        AuthenticationError,
        BadRequest,
        ChangesGone,
        CoordinatedError,
        InvalidKey,
        ListingLost,
        LockTimeout,
        NoNodeAvailable,
        NotFound,
        NotLeader,
        OutcomeUnknown,
        SessionNotFound,
        Unavailable,
        VersionConflict,
    )
    from coordinated.client.models import (
        Compare,
        KeyCount,
        KeyValue,
        Listing,
        PrefixDeleted,
        RangePage,
        SessionInfo,
        TxnResult,
        WatchBatch,
        WatchEvent,
        WriteResult,
    )
    from coordinated.client.prefix_cache import AsyncPrefixCache, CacheChange, PrefixCache
    from coordinated.client.recipes.barrier import AsyncBarrier, AsyncDoubleBarrier, Barrier, DoubleBarrier
    from coordinated.client.recipes.counter import AsyncCounter, Counter
    from coordinated.client.recipes.election import AsyncLeaderElection, LeaderElection
    from coordinated.client.recipes.group import AsyncGroupMember, GroupMember
    from coordinated.client.recipes.lock import AsyncLock, Lock
    from coordinated.client.recipes.queue import AsyncQueue, ClaimLost, Item, Queue
    from coordinated.client.recipes.rwlock import AsyncReadWriteLock, ReadWriteLock
    from coordinated.client.recipes.semaphore import AsyncSemaphore, Semaphore
    from coordinated.client.sessions import ConnectionState
    from coordinated.client.sync import Client, Session
    from coordinated.key_names import key_problem, prefix_problem

    __version__: str

# Where each public name lives (the modules above), for `__getattr__`.
_MODULES: dict[str, tuple[str, ...]] = {
    "coordinated.client.aio": ("AsyncClient", "AsyncSession"),
    "coordinated.client.calls": ("delete_op", "delete_prefix_op", "get_op", "put_op"),
    "coordinated.client.errors": (
        "ApiError",
        "AuthenticationError",
        "BadRequest",
        "ChangesGone",
        "CoordinatedError",
        "InvalidKey",
        "ListingLost",
        "LockTimeout",
        "NoNodeAvailable",
        "NotFound",
        "NotLeader",
        "OutcomeUnknown",
        "SessionNotFound",
        "Unavailable",
        "VersionConflict",
    ),
    "coordinated.client.models": (
        "Compare",
        "KeyCount",
        "KeyValue",
        "Listing",
        "PrefixDeleted",
        "RangePage",
        "SessionInfo",
        "TxnResult",
        "WatchBatch",
        "WatchEvent",
        "WriteResult",
    ),
    "coordinated.client.prefix_cache": ("AsyncPrefixCache", "CacheChange", "PrefixCache"),
    "coordinated.client.recipes.barrier": ("AsyncBarrier", "AsyncDoubleBarrier", "Barrier", "DoubleBarrier"),
    "coordinated.client.recipes.counter": ("AsyncCounter", "Counter"),
    "coordinated.client.recipes.election": ("AsyncLeaderElection", "LeaderElection"),
    "coordinated.client.recipes.group": ("AsyncGroupMember", "GroupMember"),
    "coordinated.client.recipes.lock": ("AsyncLock", "Lock"),
    "coordinated.client.recipes.queue": ("AsyncQueue", "ClaimLost", "Item", "Queue"),
    "coordinated.client.recipes.rwlock": ("AsyncReadWriteLock", "ReadWriteLock"),
    "coordinated.client.recipes.semaphore": ("AsyncSemaphore", "Semaphore"),
    "coordinated.client.sessions": ("ConnectionState",),
    "coordinated.client.sync": ("Client", "Session"),
    "coordinated.key_names": ("key_problem", "prefix_problem"),
}
_MODULE_OF = {name: module for module, names in _MODULES.items() for name in names}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("coordinated-client")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value: Any = _version()
    elif name in _MODULE_OF:
        value = getattr(importlib.import_module(_MODULE_OF[name]), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # once imported, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "ApiError",
    "AsyncBarrier",
    "AsyncClient",
    "AsyncCounter",
    "AsyncDoubleBarrier",
    "AsyncGroupMember",
    "AsyncLeaderElection",
    "AsyncLock",
    "AsyncPrefixCache",
    "AsyncQueue",
    "AsyncReadWriteLock",
    "AsyncSemaphore",
    "AsyncSession",
    "AuthenticationError",
    "BadRequest",
    "Barrier",
    "CacheChange",
    "ChangesGone",
    "ClaimLost",
    "Client",
    "Compare",
    "ConnectionState",
    "CoordinatedError",
    "Counter",
    "DoubleBarrier",
    "GroupMember",
    "InvalidKey",
    "Item",
    "KeyCount",
    "KeyValue",
    "LeaderElection",
    "Listing",
    "ListingLost",
    "Lock",
    "LockTimeout",
    "NoNodeAvailable",
    "NotFound",
    "NotLeader",
    "OutcomeUnknown",
    "PrefixCache",
    "PrefixDeleted",
    "Queue",
    "RangePage",
    "ReadWriteLock",
    "Semaphore",
    "Session",
    "SessionInfo",
    "SessionNotFound",
    "TxnResult",
    "Unavailable",
    "VersionConflict",
    "WatchBatch",
    "WatchEvent",
    "WriteResult",
    "__version__",
    "delete_op",
    "delete_prefix_op",
    "get_op",
    "key_problem",
    "prefix_problem",
    "put_op",
]
