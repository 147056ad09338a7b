"""`Driver`: the blocking or the asyncio client behind one interface, so that a test of the client's behaviour
is written once and runs against both (the `driver` fixture of conftest.py)."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any, TypeVar

import httpx

from coordinated.client import AsyncClient, AsyncSession, Client, Session

T = TypeVar("T")
Handler = Callable[[httpx.Request], httpx.Response]


class Background:
    """A call running in the background: a thread, or an asyncio task."""

    def __init__(self, thread_call: Callable[[], Any] | None = None, task: asyncio.Task[Any] | None = None) -> None:
        self.task = task
        self.value: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(thread_call,), daemon=True)
        if thread_call is not None:
            self.thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self.value = call()
        except BaseException as error:  # handed to whoever asks for the result
            self.error = error

    def done(self) -> bool:
        return self.task.done() if self.task is not None else not self.thread.is_alive()


class Driver:
    """Runs the client's calls the way one driver does: `blocking` calls them, `asyncio` awaits them on one
    event loop. `run(client.get("k"))` gives the result either way, so a test is written once for both."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.loop = asyncio.new_event_loop() if kind == "asyncio" else None

    def client(self, addresses: Any = None, *, handler: Handler | None = None, **options: Any) -> Any:
        """A client of this driver; with `handler`, every request is answered by it (httpx's MockTransport)."""
        args = () if addresses is None else (addresses,)
        if self.loop is None:
            http = None if handler is None else httpx.Client(transport=httpx.MockTransport(handler))
            return Client(*args, http=http, **options)
        async_http = None if handler is None else httpx.AsyncClient(transport=httpx.MockTransport(handler))
        return AsyncClient(*args, http=async_http, **options)

    def run(self, result: Any) -> Any:
        """The result of a call: as it is (blocking), or awaited (asyncio)."""
        if self.loop is None or not inspect.isawaitable(result):
            return result
        return self.loop.run_until_complete(result)

    def sleep(self, seconds: float) -> None:
        """Waits; the asyncio driver runs its loop meanwhile, so that its background tasks (keepalives,
        calls started with `start`) go on as a blocking client's threads do."""
        if self.loop is None:
            time.sleep(seconds)
        else:
            self.run(asyncio.sleep(seconds))

    def start(self, call: Callable[[], Any]) -> Background:
        """Runs `call()` in the background: in a thread (blocking), as a task of the loop (asyncio)."""
        if self.loop is None:
            return Background(thread_call=call)
        return Background(task=self.loop.create_task(call()))

    def result(self, background: Background, timeout: float) -> Any:
        """What a background call returned (or raised), waiting up to `timeout`; TimeoutError if not done."""
        if background.task is not None:
            return self.run(asyncio.wait_for(asyncio.shield(background.task), timeout))
        background.thread.join(timeout)
        if background.thread.is_alive():
            raise TimeoutError("the background call is still running")
        if background.error is not None:
            raise background.error
        return background.value

    def session(self, client: Any, ttl: float) -> Session | AsyncSession:
        return self.run(client.session(ttl=ttl))  # type: ignore[no-any-return]

    def pick(self, blocking: T, asyncio: T) -> T:
        """This driver's one of two classes (`Lock` or `AsyncLock`, ...)."""
        return blocking if self.loop is None else asyncio

    def take_until(self, items: Iterable[Any] | AsyncIterator[Any], last: Callable[[Any], bool]) -> Any:
        """The items of a stream (a watch, an election's observe) up to the first for which `last` is true:
        a list, or (asyncio) a coroutine of one, for `run` or `start`."""
        if isinstance(items, AsyncIterator):

            async def collect() -> list[Any]:
                taken = []
                async for item in items:
                    taken.append(item)
                    if last(item):
                        break
                return taken

            return collect()
        taken = []
        for item in items:
            taken.append(item)
            if last(item):
                break
        return taken

    def next(self, items: Iterator[Any] | AsyncIterator[Any]) -> Any:
        """The next item of a stream."""
        if isinstance(items, AsyncIterator):
            return self.run(anext(items))
        return next(items)

    def take(self, items: Iterable[Any] | AsyncIterator[Any], count: int) -> list[Any]:
        """The first `count` items of a stream."""
        counter = itertools.count(1)
        return self.run(self.take_until(items, lambda _: next(counter) >= count))  # type: ignore[no-any-return]

    def close(self, client: Any) -> None:
        self.run(client.aclose() if isinstance(client, AsyncClient) else client.close())

    def stop(self) -> None:
        if self.loop is not None:
            self.loop.close()
