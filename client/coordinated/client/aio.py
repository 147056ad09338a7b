"""The asyncio client (`AsyncClient`): the same calls as `Client`, awaited; sessions keep alive in a task."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, TypeVar

import httpx
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_random_exponential

from coordinated.client import calls
from coordinated.client.endpoints import (
    DEFAULT_ADDRESS,
    Endpoints,
    Retryable,
    body_of,
    decode,
    failure,
    from_environment,
    timeout_for,
)
from coordinated.client.errors import ChangesGone, CoordinatedError, SessionNotFound
from coordinated.client.models import KeyValue, SessionInfo, TxnResult, WatchBatch, WatchEvent, WriteResult

log = logging.getLogger("coordinated.client")
T = TypeVar("T")


class AsyncClient:
    """See `Client`: the same arguments, the same calls, each a coroutine; `watch` is an async iterator."""

    def __init__(
        self,
        addresses: str | Sequence[str] = DEFAULT_ADDRESS,
        *,
        token: str | None = None,
        verify: bool | str | ssl.SSLContext = True,
        cert: str | tuple[str, str] | None = None,
        request_timeout: float = 10.0,
        retry_timeout: float = 30.0,
        follow_master: bool = True,
    ) -> None:
        self.endpoints = Endpoints(addresses, follow_master)
        self.request_timeout = request_timeout
        self.retry_timeout = retry_timeout
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(headers=headers, verify=verify, cert=cert)
        self._sessions: weakref.WeakSet[AsyncSession] = weakref.WeakSet()

    @classmethod
    def from_env(cls, **options: Any) -> AsyncClient:
        """From `COORDINATED_URL` (default: the loopback listener) and `COORDINATED_TOKEN`, as the operator
        sets them in the cluster's pods."""
        addresses, token = from_environment()
        return cls(addresses, token=token, **options)

    async def aclose(self) -> None:
        """Stops the keepalives of this client's sessions (without ending them) and closes its connections."""
        for session in list(self._sessions):
            await session.stop_keepalive()
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _send(self, address: str, call: calls.Call[T], timeout_s: float | None = None) -> T:
        try:
            response = await self._http.request(
                call.method,
                address + call.path,
                params=dict(call.params),
                timeout=timeout_for(call, timeout_s or self.request_timeout),
                **body_of(call),
            )
        except httpx.TransportError as error:
            self.endpoints.failed(address)
            raise failure(call, address, error) from error
        body = decode(response)
        if response.status_code == 503:
            self.endpoints.failed(address)
            raise failure(call, address, None, 503, body)
        return call.parse(response.status_code, body)

    async def _find_master(self) -> None:
        endpoints = self.endpoints
        endpoints.find_master = False
        try:
            master = await self._send(endpoints.current, calls.cat_master(), timeout_s=2.0)
        except (Retryable, CoordinatedError):
            return
        if master is None:
            return
        for address in endpoints.addresses:
            if address not in endpoints.names:
                try:
                    name = await self._send(address, calls.node_name(), timeout_s=2.0)
                except (Retryable, CoordinatedError):
                    continue
                if name is not None:
                    endpoints.names[address] = name
        endpoints.use_node(master)

    async def call(self, call: calls.Call[T]) -> T:
        retrying = AsyncRetrying(
            stop=stop_after_delay(self.retry_timeout),
            wait=wait_random_exponential(multiplier=0.05, max=1.0),
            retry=retry_if_exception_type(Retryable),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    if self.endpoints.find_master:
                        await self._find_master()
                    return await self._send(self.endpoints.current, call)
        except Retryable as retryable:
            raise retryable.error from retryable.__cause__
        raise AssertionError("unreachable: tenacity either returns or raises")

    async def get(self, key: str, *, local: bool = False) -> KeyValue:
        return await self.call(calls.get(key, local))

    async def put(self, key: str, value: Any, *, session: str | None = None) -> WriteResult:
        return await self.call(calls.put(key, value, session=session))

    async def create(self, key: str, value: Any, *, session: str | None = None) -> WriteResult:
        return await self.call(calls.put(key, value, create=True, session=session))

    async def cas(self, key: str, value: Any, version: int, *, session: str | None = None) -> WriteResult:
        return await self.call(calls.put(key, value, if_version=version, session=session))

    async def delete(self, key: str, *, if_version: int | None = None) -> WriteResult:
        return await self.call(calls.delete(key, if_version=if_version))

    async def txn(
        self,
        compare: Sequence[tuple[str, int]],
        success: Sequence[Mapping[str, Any]],
        failure: Sequence[Mapping[str, Any]] = (),
    ) -> TxnResult:
        return await self.call(calls.txn(compare, success, failure))

    async def watch_once(
        self, prefix: str = "", after_version: int | None = None, *, timeout: float = 30.0, local: bool = False
    ) -> WatchBatch:
        return await self.call(calls.watch(prefix, after_version, timeout, local))

    async def watch(
        self, prefix: str = "", after_version: int | None = None, *, timeout: float = 30.0, local: bool = False
    ) -> AsyncIterator[WatchEvent]:
        after = after_version
        while True:
            try:
                batch = await self.watch_once(prefix, after, timeout=timeout, local=local)
            except ChangesGone:
                version, values = await self.call(calls.snapshot(prefix))
                for event in calls.reset_events(prefix, version, values):
                    yield event
                after = version
                continue
            for event in batch.events:
                yield event
            after = batch.version

    async def create_session(self, ttl: float | None = None, *, node: str | None = None) -> SessionInfo:
        return await self.call(calls.create_session(ttl, node))

    async def keepalive(self, session_id: str) -> None:
        await self.call(calls.keepalive(session_id))

    async def end_session(self, session_id: str) -> None:
        await self.call(calls.end_session(session_id))

    async def sessions(self) -> Any:
        return await self.call(calls.list_sessions())

    async def session(self, ttl: float = 10.0, on_expired: Callable[[], None] | None = None) -> AsyncSession:
        session = AsyncSession(self, await self.create_session(ttl), ttl, on_expired)
        self._sessions.add(session)
        return session


class AsyncSession:
    """See `Session`; the keepalives run in a task of the running loop."""

    def __init__(
        self, client: AsyncClient, info: SessionInfo, ttl: float, on_expired: Callable[[], None] | None = None
    ) -> None:
        self.client = client
        self.id = info.id
        self.ttl = ttl
        self.expired = asyncio.Event()
        self.renewed_at = time.monotonic()
        self._on_expired = on_expired
        self._task = asyncio.get_running_loop().create_task(self._keep_alive())

    async def _keep_alive(self) -> None:
        while True:
            await asyncio.sleep(self.ttl / 3)
            try:
                await self.client.keepalive(self.id)
                self.renewed_at = time.monotonic()
            except SessionNotFound:
                self.expired.set()
                if self._on_expired is not None:
                    self._on_expired()
                return
            except CoordinatedError as error:
                log.warning("keepalive of session %s failed: %s", self.id, error)

    async def stop_keepalive(self) -> None:
        """Stops the keepalives; the session then expires after its TTL."""
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def end(self) -> None:
        await self.stop_keepalive()
        if not self.expired.is_set():
            with contextlib.suppress(SessionNotFound):
                await self.client.end_session(self.id)
            self.expired.set()

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.end()
