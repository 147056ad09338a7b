"""The asyncio driver: `AsyncClient` performs the flows' steps with `httpx.AsyncClient` and `asyncio.sleep`,
and an `AsyncSession` keeps alive from a task. The calls are those of `Client`, as coroutines; `watch` is
an async iterator."""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeVar, Unpack, cast

import httpx

from coordinated.client import operations
from coordinated.client import sessions as session_flows
from coordinated.client.base import ClientBase, ClientOptions
from coordinated.client.endpoints import DEFAULT_ADDRESS
from coordinated.client.flow import (
    CloseStream,
    Emit,
    Flow,
    ReadLine,
    Sleep,
    Stepper,
    Stream,
    awaiting,
    awaiting_stream,
)
from coordinated.client.models import SessionInfo

T = TypeVar("T")
E = TypeVar("E")


class AsyncClient(ClientBase):
    """An asyncio client of the sidecars' API; see `ClientBase` for the options. `http`: an
    `httpx.AsyncClient` to send through (the caller closes it), instead of one of its own."""

    def __init__(
        self,
        addresses: str | Sequence[str] = DEFAULT_ADDRESS,
        *,
        http: httpx.AsyncClient | None = None,
        **options: Unpack[ClientOptions],
    ) -> None:
        super().__init__(addresses, **options)
        self._owns_http = http is None
        self.http = http if http is not None else httpx.AsyncClient(verify=self.verify, cert=self.cert)
        self._sessions: weakref.WeakSet[AsyncSession] = weakref.WeakSet()

    async def aclose(self) -> None:
        """Stops the keepalives of this client's sessions (without ending them) and closes its connections."""
        for session in list(self._sessions):
            await session.stop_keepalive()
        if self._owns_http:
            await self.http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- the driver -------------------------------------------------------------------------------------

    async def run_flow(self, flow: Flow[T]) -> T:
        """Performs the flow's steps and returns its result; cancelling the task closes the flow."""
        stepper = Stepper(flow, stream=False)
        async for _ in self._drive(stepper):
            pass
        return cast(T, stepper.result)

    def iterate_flow(self, stream: Stream[E]) -> AsyncIterator[E]:
        return cast(AsyncIterator[E], self._drive(Stepper(stream, stream=True)))

    async def _drive(self, stepper: Stepper[Any]) -> AsyncIterator[Any]:
        held = _HeldStream()
        async with contextlib.aclosing(held):
            with contextlib.closing(stepper.flow):
                while (step := stepper.next_step()) is not None:
                    if isinstance(step, Emit):
                        yield step.item
                    elif isinstance(step, Sleep):
                        await asyncio.sleep(step.seconds)
                    elif isinstance(step, ReadLine):
                        with stepper.sending():
                            stepper.succeeded(await held.next_line())
                    elif isinstance(step, CloseStream):
                        await held.aclose()
                    elif step.stream:
                        await held.aclose()
                        with stepper.sending():
                            request = self.http.build_request(step.method, step.url, **self.request_options(step))
                            stepper.succeeded(await held.open(await self.http.send(request, stream=True)))
                    else:
                        with stepper.sending():
                            response = await self.http.request(step.method, step.url, **self.request_options(step))
                            stepper.succeeded(response)

    # -- the calls (operations.py) ----------------------------------------------------------------------

    get = awaiting(operations.get)
    put = awaiting(operations.put)
    create = awaiting(operations.create)
    cas = awaiting(operations.cas)
    delete = awaiting(operations.delete)
    delete_prefix = awaiting(operations.delete_prefix)
    txn = awaiting(operations.txn)
    get_range = awaiting(operations.get_range)
    range_pages = awaiting_stream(operations.range_pages)
    list_prefix = awaiting(operations.list_prefix)
    count = awaiting(operations.count)
    watch_once = awaiting(operations.watch_once)
    watch = awaiting_stream(operations.watch)
    create_session = awaiting(operations.create_session)
    keepalive = awaiting(operations.keepalive)
    end_session = awaiting(operations.end_session)
    sessions = awaiting(operations.sessions)
    node_info = awaiting(operations.node_info)
    cluster_health = awaiting(operations.cluster_health)
    cluster_state = awaiting(operations.cluster_state)
    cluster_settings = awaiting(operations.cluster_settings)
    put_cluster_settings = awaiting(operations.put_cluster_settings)
    add_voting_config_exclusions = awaiting(operations.add_voting_config_exclusions)
    clear_voting_config_exclusions = awaiting(operations.clear_voting_config_exclusions)
    put_fs_repository = awaiting(operations.put_fs_repository)
    put_repository = awaiting(operations.put_repository)
    create_snapshot = awaiting(operations.create_snapshot)
    list_snapshots = awaiting(operations.list_snapshots)
    delete_snapshot = awaiting(operations.delete_snapshot)
    restore_snapshot = awaiting(operations.restore_snapshot)

    async def session(
        self, ttl: float = 10.0, on_expired: Callable[[], None] | None = None, *, safety_margin: float | None = None
    ) -> AsyncSession:
        """A TTL session kept alive by a task of the running loop until `end()` (or the `async with`); see
        `Client.session`."""
        margin = session_flows.safety_margin_of(ttl, safety_margin)  # checked before the session is created
        created_at = time.monotonic()  # the TTL runs from no earlier than this
        session = AsyncSession(self, await self.create_session(ttl), ttl, on_expired, created_at, margin)
        self._sessions.add(session)
        return session


class _HeldStream:
    """The open answer of a flow's streaming `Send`, read line by line."""

    def __init__(self) -> None:
        self.response: httpx.Response | None = None
        self.lines: AsyncIterator[str] | None = None

    async def open(self, response: httpx.Response) -> httpx.Response:
        """Holds a 200 answer open; reads any other whole (an error to parse) and closes it."""
        if response.status_code != 200:
            try:
                await response.aread()
            finally:
                await response.aclose()
            return response
        self.response, self.lines = response, response.aiter_lines()
        return response

    async def next_line(self) -> str | None:
        """The next line; None at the end. The stream is closed at its end and when a read fails."""
        if self.lines is None:
            return None
        try:
            line = await anext(self.lines, None)
        except BaseException:
            await self.aclose()
            raise
        if line is None:
            await self.aclose()
        return line

    async def aclose(self) -> None:
        if self.response is not None:
            await self.response.aclose()
        self.response, self.lines = None, None


class AsyncRecipe:
    """A recipe's flows run by the asyncio client it was given."""

    client: AsyncClient

    async def run_flow(self, flow: Flow[T]) -> T:
        return await self.client.run_flow(flow)

    def iterate_flow(self, stream: Stream[E]) -> AsyncIterator[E]:
        return self.client.iterate_flow(stream)


class AsyncSession(session_flows.SessionBase):
    """A TTL session that a task keeps alive while another watches its clock; see `SessionBase`. `expired`
    is an `asyncio.Event`."""

    expired: asyncio.Event

    def __init__(
        self,
        client: AsyncClient,
        info: SessionInfo,
        ttl: float,
        on_expired: Callable[[], None] | None = None,
        created_at: float | None = None,
        safety_margin: float | None = None,
    ) -> None:
        super().__init__(info, ttl, asyncio.Event(), on_expired, created_at, safety_margin)
        self.client = client
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(client.run_flow(session_flows.keep_alive(client, self)), name=f"session-{self.id}"),
            loop.create_task(client.run_flow(session_flows.watch_clock(self)), name=f"session-clock-{self.id}"),
        ]

    async def stop_keepalive(self) -> None:
        """Stops the keepalives (and the watch of the clock); the session then expires after its TTL."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def end(self) -> None:
        """Ends the session (its ephemeral keys go with it) and stops the keepalives: `ended`."""
        await self.stop_keepalive()
        await self.client.run_flow(session_flows.end(self.client, self))

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.end()
