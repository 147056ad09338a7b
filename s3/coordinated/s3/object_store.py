"""S3-compatible object storage for the history archive and the `s3` snapshot repository.

Every S3 request of a node runs on an event loop of its own, in a daemon thread (`ObjectStore`): signing a
request and checksumming its body are CPU work proportional to its size (a 16 MB segment, a large snapshot),
and on the node's loop they would hold up the write path and the election timers. Callers on any loop await
`Bucket` methods, which hop to that loop and back.

The S3 client is aiobotocore's: SigV4 signing, the standard AWS credential chain (environment, web-identity
token, IMDS...) and botocore's `standard` retry mode (exponential backoff with jitter on throttling, 5xx and
connection errors, `s3.client.NAME.max_retries` times). Every request has an overall deadline, its retries
included: `s3.client.NAME.call_timeout`, plus a second for each MiB it sends, or receives once the answer says
how much (`MIN_TRANSFER_BYTES_PER_S`). botocore's `read_timeout` bounds each wait for bytes of an answer, but
not a request that cannot send its body, nor its retries; a store that hangs (stopped with SIGSTOP: the kernel
still accepts connections) would hold an upload for minutes. Past the deadline the request is cancelled and
fails like any other. When `s3.client.NAME.credentials_file` is set, the
credentials come from that file only, re-read every few minutes so that a rotated Kubernetes Secret is picked
up. Errors become `ObjectStoreError` with a message that names the operation, the object and S3's error code,
and never a credential: botocore's own loggers, whose debug output carries request headers, are held at
WARNING.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import aiohttp

from coordinated.s3.object_errors import ObjectExists, ObjectMissing, ObjectStoreError
from coordinated.s3.s3_settings import S3ClientSettings

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client

T = TypeVar("T")
CLOSE_TIMEOUT_S = 10.0
# The slowest transfer a request's deadline allows for: a second per MiB on top of `call_timeout`.
MIN_TRANSFER_BYTES_PER_S = 1 << 20
# The deadline of the request running in this task, which a download extends once it knows the body's size.
_DEADLINE: contextvars.ContextVar[asyncio.Timeout | None] = contextvars.ContextVar("s3_deadline", default=None)

__all__ = ["Bucket", "ObjectExists", "ObjectInfo", "ObjectMissing", "ObjectStore", "ObjectStoreError"]


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    metadata: dict[str, str] | None = None  # the object's user metadata (`x-amz-meta-*`), from a HEAD only
    last_modified: float | None = None  # seconds, from a listing only


# The S3 client (aiobotocore) is loaded with a node's first request to an object store, not at start-up.


def _request_errors() -> tuple[type[BaseException], ...]:
    from coordinated.s3.botocore_backend import REQUEST_ERRORS

    return REQUEST_ERRORS


def _translate(error: BaseException, what: str) -> ObjectStoreError:
    from coordinated.s3.botocore_backend import translate

    return translate(error, what)


def _is_not_found(error: BaseException) -> bool:
    from coordinated.s3.botocore_backend import is_not_found

    return is_not_found(error)


class ObjectStore:
    """The node's S3 clients, by client settings, on one event loop in a thread of their own."""

    def __init__(self, thread_name: str = "s3") -> None:
        self._thread_name = thread_name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._clients: dict[S3ClientSettings, tuple[S3Client, contextlib.AbstractAsyncContextManager[S3Client]]] = {}
        self._lock = threading.Lock()
        self._creating: asyncio.Lock | None = None

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._ready.clear()
                self._thread = threading.Thread(target=self._serve, name=self._thread_name, daemon=True)
                self._thread.start()
                self._ready.wait()
            assert self._loop is not None
            return self._loop

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _client(self, settings: S3ClientSettings) -> S3Client:
        known = self._clients.get(settings)
        if known is not None:
            return known[0]
        if self._creating is None:
            self._creating = asyncio.Lock()  # on the store's loop, where every caller of this runs
        async with self._creating:  # concurrent first requests share one client
            known = self._clients.get(settings)
            if known is not None:
                return known[0]
            return await self._create_client(settings)

    async def _create_client(self, settings: S3ClientSettings) -> S3Client:
        from coordinated.s3 import botocore_backend  # loaded with the first client

        client, context = await botocore_backend.create_client(settings)
        self._clients[settings] = (client, context)
        return client

    async def _drop_client(self, settings: S3ClientSettings) -> None:
        known = self._clients.pop(settings, None)
        if known is not None:
            with contextlib.suppress(Exception):
                await known[1].__aexit__(None, None, None)

    async def call(
        self,
        settings: S3ClientSettings,
        what: str,
        operation: Callable[[S3Client], Awaitable[T]],
        *,
        sends: int = 0,
    ) -> T:
        """Run `operation` with the client for `settings` on the store's loop, within its deadline (see the
        module's docstring; `sends`: the bytes it uploads); raises ObjectStoreError."""
        deadline_s = settings.call_timeout_s + sends / MIN_TRANSFER_BYTES_PER_S

        async def run() -> T:
            started = asyncio.get_running_loop().time()
            deadline = asyncio.timeout(deadline_s)
            try:
                async with deadline:
                    _DEADLINE.set(deadline)
                    return await operation(await self._client(settings))
            except ObjectStoreError:
                raise
            except TimeoutError:
                if not deadline.expired():
                    raise ObjectStoreError(f"{what}: timed out") from None
                allowed = (deadline.when() or started + deadline_s) - started
                raise ObjectStoreError(
                    f"{what}: no answer within {allowed:.0f}s (s3.client.{settings.name}.call_timeout, "
                    "retries included)"
                ) from None
            except Exception as error:
                if not isinstance(error, (aiohttp.ClientError, OSError, TimeoutError, *_request_errors())):
                    raise
                translated = _translate(error, what)
            if translated.status in (401, 403):
                # Refused credentials: the next request builds a new client, which reads them afresh (a fixed
                # credentials file or environment takes effect at once, not at the next refresh).
                await self._drop_client(settings)
            raise translated

        future = asyncio.run_coroutine_threadsafe(run(), self._start())
        return await asyncio.wrap_future(future)

    async def close(self) -> None:
        """Close every client and stop the thread (bounded: a hung request does not hold up a node's stop)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return

        async def close_clients() -> None:
            for settings in list(self._clients):
                await self._drop_client(settings)

        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                asyncio.wrap_future(asyncio.run_coroutine_threadsafe(close_clients(), loop)), CLOSE_TIMEOUT_S
            )
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, CLOSE_TIMEOUT_S)
        self._loop = self._thread = None
        self._creating = None

    def bucket(self, settings: S3ClientSettings, name: str) -> Bucket:
        return Bucket(self, settings, name)


def _allow_transfer(size: int) -> None:
    """Extend the running request's deadline for a body of `size` bytes to come (a second per MiB)."""
    deadline = _DEADLINE.get()
    when = deadline.when() if deadline is not None else None
    if deadline is not None and when is not None:
        deadline.reschedule(when + size / MIN_TRANSFER_BYTES_PER_S)


def _next_request(settings: S3ClientSettings) -> None:
    """A call of several requests (a listing's pages): each one that follows gets a deadline of its own."""
    deadline = _DEADLINE.get()
    if deadline is not None:
        deadline.reschedule(asyncio.get_running_loop().time() + settings.call_timeout_s)


class Bucket:
    """One bucket through one client: the handful of operations the archive and the snapshots need."""

    def __init__(self, store: ObjectStore, settings: S3ClientSettings, name: str) -> None:
        self.store = store
        self.settings = settings
        self.name = name

    def uri(self, key: str = "") -> str:
        return f"s3://{self.name}/{key}"

    async def put_new(self, key: str, data: bytes, metadata: dict[str, str] | None = None) -> None:
        """Write an object that must not exist yet (`If-None-Match: *`); ObjectExists if it does."""

        async def put(client: S3Client) -> None:
            await client.put_object(Bucket=self.name, Key=key, Body=data, IfNoneMatch="*", Metadata=metadata or {})

        await self.store.call(self.settings, f"cannot write {self.uri(key)}", put, sends=len(data))

    async def put(self, key: str, data: bytes) -> None:
        """Write (or replace) an object."""

        async def put(client: S3Client) -> None:
            await client.put_object(Bucket=self.name, Key=key, Body=data)

        await self.store.call(self.settings, f"cannot write {self.uri(key)}", put, sends=len(data))

    async def get(self, key: str) -> bytes:
        async def get(client: S3Client) -> bytes:
            response = await client.get_object(Bucket=self.name, Key=key)
            _allow_transfer(int(response.get("ContentLength") or 0))
            async with response["Body"] as body:
                data: bytes = await body.read()
            return data

        return await self.store.call(self.settings, f"cannot read {self.uri(key)}", get)

    async def head(self, key: str) -> ObjectInfo | None:
        async def head(client: S3Client) -> ObjectInfo | None:
            try:
                response = await client.head_object(Bucket=self.name, Key=key)
            except Exception as error:
                if _is_not_found(error):
                    return None
                raise
            return ObjectInfo(key, int(response["ContentLength"]), dict(response.get("Metadata") or {}))

        return await self.store.call(self.settings, f"cannot look up {self.uri(key)}", head)

    async def list(self, prefix: str) -> list[ObjectInfo]:
        """Every object whose key starts with `prefix`, in key order."""

        async def list_all(client: S3Client) -> list[ObjectInfo]:
            found: list[ObjectInfo] = []
            paginator = client.get_paginator("list_objects_v2")
            async for page in paginator.paginate(Bucket=self.name, Prefix=prefix):
                _next_request(self.settings)
                found.extend(
                    ObjectInfo(item["Key"], int(item["Size"]), last_modified=item["LastModified"].timestamp())
                    for item in page.get("Contents", ())
                )
            return found

        return await self.store.call(self.settings, f"cannot list {self.uri(prefix)}", list_all)

    async def delete(self, key: str) -> None:
        async def delete(client: S3Client) -> None:
            await client.delete_object(Bucket=self.name, Key=key)

        await self.store.call(self.settings, f"cannot delete {self.uri(key)}", delete)

    async def verify(self, prefix: str = "") -> None:
        """Prove that this node can write, read and delete under `prefix` (as a repository is verified)."""
        key = f"{prefix}.verify-{uuid.uuid4().hex}"
        await self.put(key, b"ok")
        await self.get(key)
        await self.delete(key)
