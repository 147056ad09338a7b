"""`coordinated.client`: a Python client for applications, sync (`Client`) and asyncio (`AsyncClient`), with
the `Lock` and `LeaderElection` recipes and their fencing tokens. See docs/applications.md."""

from coordinated.client.aio import AsyncClient, AsyncSession
from coordinated.client.aio_recipes import AsyncLeaderElection, AsyncLock
from coordinated.client.calls import delete_op, get_op, put_op
from coordinated.client.errors import (
    ApiError,
    AuthenticationError,
    BadRequest,
    ChangesGone,
    CoordinatedError,
    NoNodeAvailable,
    NotFound,
    OutcomeUnknown,
    SessionNotFound,
    Unavailable,
    VersionConflict,
)
from coordinated.client.models import KeyValue, SessionInfo, TxnResult, WatchBatch, WatchEvent, WriteResult
from coordinated.client.recipes import LeaderElection, Lock, LockTimeout
from coordinated.client.sync import Client, Session

__all__ = [
    "ApiError",
    "AsyncClient",
    "AsyncLeaderElection",
    "AsyncLock",
    "AsyncSession",
    "AuthenticationError",
    "BadRequest",
    "ChangesGone",
    "Client",
    "CoordinatedError",
    "KeyValue",
    "LeaderElection",
    "Lock",
    "LockTimeout",
    "NoNodeAvailable",
    "NotFound",
    "OutcomeUnknown",
    "Session",
    "SessionInfo",
    "SessionNotFound",
    "TxnResult",
    "Unavailable",
    "VersionConflict",
    "WatchBatch",
    "WatchEvent",
    "WriteResult",
    "delete_op",
    "get_op",
    "put_op",
]
