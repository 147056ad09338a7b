"""`coordinated.client`: a Python client for applications, blocking (`Client`) and asyncio (`AsyncClient`),
with the `Lock` and `LeaderElection` recipes and their fencing tokens. See docs/applications.md."""

from importlib.metadata import PackageNotFoundError, version

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
    QuotaExceeded,
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

try:
    __version__ = version("coordinated-client")
except PackageNotFoundError:  # run from a source tree that is not installed
    __version__ = "0+unknown"

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
    "QuotaExceeded",
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
