"""Flows: every algorithm of the client written once, for the blocking and the asyncio client alike.

A flow is a generator that yields steps and gets each step's outcome back at its `yield`:

- `Send`: an HTTP request; the outcome is the `httpx.Response`, or the `httpx.TransportError` raised at the
  `yield`. With `stream=True` the driver keeps a 200 answer's body unread and open (one per flow, a held
  stream) for the `ReadLine` steps that follow; any other answer it reads whole, as for a plain `Send`;
- `ReadLine`: the next line of the held stream (without its newline), None once it has ended, or the
  `httpx.TransportError` that broke it, raised at the `yield`;
- `CloseStream`: closes the held stream (the driver also closes it when the flow opens another one, when a
  read fails or ends it, and when the flow ends);
- `Sleep`: a pause;
- `Emit`: in a flow that produces a stream of items (`Stream`), the next item for the caller.

A driver performs the steps: `Client` with `httpx.Client`, `time.sleep` and threads, `AsyncClient` with
`httpx.AsyncClient`, `asyncio.sleep` and tasks. Nothing else differs between the two, so finding the master,
retries, watches with their resets, sessions and every recipe are flows, as httpx's authentication flows
are. Flows compose with `yield from`, and a flow's `return` value is its result.

`blocking`, `awaiting`, `blocking_stream` and `awaiting_stream` turn a flow function into a method of a
driver's class, keeping its signature and docstring: a new call or recipe is one flow and one line per
driver (docs/applications.md, "Adding a call or a recipe").
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import AsyncIterator, Callable, Coroutine, Generator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeAlias, TypeVar, cast

import httpx

T = TypeVar("T")
E = TypeVar("E")
E_co = TypeVar("E_co", covariant=True)
S = TypeVar("S")
P = ParamSpec("P")


@dataclass(frozen=True)
class Send:
    """One HTTP request; `body` is JSON, or None for none."""

    method: str
    url: str
    params: Mapping[str, str | list[str]]
    body: bytes | None
    timeout: httpx.Timeout
    stream: bool = False


@dataclass(frozen=True)
class ReadLine:
    """The next line of the held stream."""


@dataclass(frozen=True)
class CloseStream:
    """Done with the held stream."""


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Emit(Generic[E]):
    """The next item of a stream, for the caller; the flow resumes when the caller asks for another."""

    item: E


Step: TypeAlias = Send | Sleep | ReadLine | CloseStream
Flow: TypeAlias = Generator[Step, Any, T]
Stream: TypeAlias = Generator[Step | Emit[E], Any, None]


def next_item(stream: Stream[E]) -> Flow[E]:
    """Performs a stream's steps until it emits its next item, and returns the item: a flow that consumes
    a stream (a prefix cache reading a watch) handles each item itself. The stream resumes at the next call;
    close it when done. Raises `StopIteration`'s value as `EndOfStream` if the stream ends."""
    value: Any = None
    error: Exception | None = None
    while True:
        try:
            step = stream.throw(error) if error is not None else stream.send(value)
        except StopIteration as done:
            raise EndOfStream(f"{stream!r} ended") from done
        if isinstance(step, Emit):
            return step.item
        try:
            value, error = (yield step), None
        except Exception as raised:  # a transport error, for the stream to handle
            value, error = None, raised


class EndOfStream(Exception):
    """A stream consumed with `next_item` has no more items."""


class Stepper(Generic[T]):
    """Moves a flow on by one step at a time, for a driver: `next_step` returns the step to perform (None
    once the flow has returned, its value in `result`); the driver reports a request's outcome with
    `succeeded`, or performs it inside `sending`, which hands a transport error to the flow."""

    def __init__(self, flow: Generator[Step | Emit[Any], Any, T], stream: bool) -> None:
        self.flow = flow
        self.stream = stream
        self.result: T | None = None
        self._value: Any = None
        self._error: BaseException | None = None

    def next_step(self) -> Step | Emit[Any] | None:
        value, error = self._value, self._error
        self._value, self._error = None, None
        try:
            step = self.flow.throw(error) if error is not None else self.flow.send(value)
        except StopIteration as done:
            self.result = done.value
            return None
        if isinstance(step, Emit) and not self.stream:
            raise NotAStream(f"{self.flow!r} emitted {step.item!r}")
        return step

    def succeeded(self, value: Any = None) -> None:
        self._value = value

    @contextlib.contextmanager
    def sending(self) -> Iterator[None]:
        try:
            yield
        except httpx.TransportError as error:
            self._error = error


class NotAStream(TypeError):
    """A flow run for its result emitted an item: it is a `Stream`, and wants `blocking_stream` or
    `awaiting_stream`."""


class AsyncDriver(Protocol):
    async def run_flow(self, flow: Flow[T], /) -> T: ...


# A method's subject (a client, or a recipe holding one) runs the flow through its driver: the subject's
# class provides `run_flow` and `iterate_flow` (sync.py and aio.py define them for clients and recipes).


def _presented(method: Callable[..., Any], flow: Callable[..., Any], returns: str) -> None:
    """`help()` and `inspect.signature` show the method as called: `Flow[X]` becomes `returns` with X."""
    signature = inspect.signature(flow)
    annotation = signature.return_annotation
    if isinstance(annotation, str) and annotation.endswith("]") and "[" in annotation:
        inner = annotation[annotation.index("[") + 1 : -1]
        method.__signature__ = signature.replace(return_annotation=returns.format(inner))  # type: ignore[attr-defined]


def _method(flow: Callable[..., Any], drive: str, returns: str) -> Callable[..., Any]:
    """A method that builds the flow and hands it to its subject's `drive` (`run_flow` or `iterate_flow`)."""

    @functools.wraps(flow)
    def method(self: Any, /, *args: Any, **kwargs: Any) -> Any:
        return getattr(self, drive)(flow(self, *args, **kwargs))

    _presented(method, flow, returns)
    return method


def blocking(flow: Callable[Concatenate[S, P], Flow[T]]) -> Callable[Concatenate[S, P], T]:
    """The flow as a blocking method."""
    return _method(flow, "run_flow", "{}")


class ClosableIterator(Protocol[E_co]):
    """A blocking stream's items (sync.py's `BlockingStream`): `close()` ends it, from any thread."""

    def __iter__(self) -> ClosableIterator[E_co]: ...

    def __next__(self) -> E_co: ...

    def close(self) -> None: ...


def blocking_stream(
    stream: Callable[Concatenate[S, P], Stream[E]],
) -> Callable[Concatenate[S, P], ClosableIterator[E]]:
    """The stream as a method that returns an iterator of its items, which any thread may `close()`."""
    return _method(stream, "iterate_flow", "BlockingStream[{}]")


def awaiting_stream(stream: Callable[Concatenate[S, P], Stream[E]]) -> Callable[Concatenate[S, P], AsyncIterator[E]]:
    """The stream as a method that returns an async iterator of its items."""
    return _method(stream, "iterate_flow", "AsyncIterator[{}]")


def awaiting(flow: Callable[Concatenate[S, P], Flow[T]]) -> Callable[Concatenate[S, P], Coroutine[Any, Any, T]]:
    """The flow as a coroutine method (a coroutine function, as `inspect` and frameworks expect)."""

    @functools.wraps(flow)
    async def method(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await cast(AsyncDriver, self).run_flow(flow(self, *args, **kwargs))

    _presented(method, flow, "{}")
    return method
