"""The blocking driver: `Client` performs the flows' steps with `httpx.Client` and `time.sleep`, and a
`Session` keeps alive from a daemon thread. Every call is a flow of `operations` (see flow.py)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterator, Sequence
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
    blocking,
    blocking_stream,
)
from coordinated.client.models import SessionInfo

T = TypeVar("T")
E = TypeVar("E")


class Client(ClientBase):
    """A blocking client of the sidecars' API; see `ClientBase` for the options. `http`: an
    `httpx.Client` to send through (the caller closes it), instead of one of its own."""

    def __init__(
        self,
        addresses: str | Sequence[str] = DEFAULT_ADDRESS,
        *,
        http: httpx.Client | None = None,
        **options: Unpack[ClientOptions],
    ) -> None:
        super().__init__(addresses, **options)
        self._owns_http = http is None
        self.http = http if http is not None else httpx.Client(verify=self.verify, cert=self.cert)
        self._sessions: weakref.WeakSet[Session] = weakref.WeakSet()

    def close(self) -> None:
        """Stops the keepalives of this client's sessions (without ending them) and closes its connections."""
        for session in list(self._sessions):
            session.stop_keepalive()
        if self._owns_http:
            self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the driver -------------------------------------------------------------------------------------

    def run_flow(self, flow: Flow[T], stop: threading.Event | None = None) -> T:
        """Performs the flow's steps and returns its result; with `stop`, a pause ends early when `stop` is
        set, and so does the flow (its result is then None)."""
        stepper = Stepper(flow, stream=False)
        for _ in self._drive(stepper, stop):
            pass
        return cast(T, stepper.result)

    def iterate_flow(self, stream: Stream[E]) -> BlockingStream[E]:
        """The stream's items, as an iterator that any thread may `close()`."""
        return BlockingStream(self, Stepper(stream, stream=True))

    def _drive(
        self, stepper: Stepper[Any], stop: threading.Event | None = None, held: _HeldStream | None = None
    ) -> Generator[Any, None, None]:
        held = held or _HeldStream()
        with contextlib.closing(stepper.flow), contextlib.closing(held):
            while (step := stepper.next_step()) is not None:
                if stop is not None and stop.is_set():
                    return  # stopped: the flow is closed
                if isinstance(step, Emit):
                    yield step.item
                elif isinstance(step, Sleep):
                    if stop is None:
                        time.sleep(step.seconds)
                    elif stop.wait(step.seconds):
                        return  # stopped: the flow is closed
                elif isinstance(step, ReadLine):
                    with stepper.sending():
                        stepper.succeeded(held.next_line())
                elif isinstance(step, CloseStream):
                    held.close()
                elif step.stream:
                    held.close()
                    with stepper.sending():
                        request = self.http.build_request(step.method, step.url, **self.request_options(step))
                        stepper.succeeded(held.open(self.http.send(request, stream=True)))
                else:
                    with stepper.sending():
                        stepper.succeeded(self.http.request(step.method, step.url, **self.request_options(step)))

    # -- the calls (operations.py) ----------------------------------------------------------------------

    get = blocking(operations.get)
    put = blocking(operations.put)
    create = blocking(operations.create)
    cas = blocking(operations.cas)
    delete = blocking(operations.delete)
    delete_prefix = blocking(operations.delete_prefix)
    txn = blocking(operations.txn)
    get_range = blocking(operations.get_range)
    range_pages = blocking_stream(operations.range_pages)
    list_prefix = blocking(operations.list_prefix)
    count = blocking(operations.count)
    watch_once = blocking(operations.watch_once)
    watch = blocking_stream(operations.watch)
    create_session = blocking(operations.create_session)
    keepalive = blocking(operations.keepalive)
    end_session = blocking(operations.end_session)
    sessions = blocking(operations.sessions)
    node_info = blocking(operations.node_info)
    cluster_health = blocking(operations.cluster_health)
    cluster_state = blocking(operations.cluster_state)
    cluster_settings = blocking(operations.cluster_settings)
    put_cluster_settings = blocking(operations.put_cluster_settings)
    add_voting_config_exclusions = blocking(operations.add_voting_config_exclusions)
    clear_voting_config_exclusions = blocking(operations.clear_voting_config_exclusions)
    put_fs_repository = blocking(operations.put_fs_repository)
    put_repository = blocking(operations.put_repository)
    create_snapshot = blocking(operations.create_snapshot)
    list_snapshots = blocking(operations.list_snapshots)
    delete_snapshot = blocking(operations.delete_snapshot)
    restore_snapshot = blocking(operations.restore_snapshot)

    def session(
        self, ttl: float = 10.0, on_expired: Callable[[], None] | None = None, *, safety_margin: float | None = None
    ) -> Session:
        """A TTL session kept alive in the background until `end()` (or the end of a `with` block).
        `on_expired` is called once the cluster says the session ended (`lost`). The session is `suspended`
        once no keepalive has succeeded for `ttl - safety_margin` seconds (default margin: a tenth of the TTL)."""
        margin = session_flows.safety_margin_of(ttl, safety_margin)  # checked before the session is created
        created_at = time.monotonic()  # the TTL runs from no earlier than this
        session = Session(self, self.create_session(ttl), ttl, on_expired, created_at, margin)
        self._sessions.add(session)
        return session


class BlockingStream(Iterator[E]):
    """The items of a stream (a watch, the pages of a listing, an election's leaders), one per `next()`.
    `close()` ends it from any thread: a `next()` waiting for the stream's next line (a watch waiting for a
    change) ends at once with StopIteration, as does every later one, and its connection is closed."""

    def __init__(self, client: Client, stepper: Stepper[Any]) -> None:
        self._stop = threading.Event()
        self._held = _HeldStream()
        self._items = client._drive(stepper, self._stop, self._held)
        self._iterating = threading.Lock()  # held by the thread inside `next()`

    def __iter__(self) -> BlockingStream[E]:
        return self

    def __next__(self) -> E:
        with self._iterating:
            return cast(E, next(self._items))

    def close(self) -> None:
        self._stop.set()  # the driver ends at its next step, a pause ends at once
        self._held.abort()  # a read under way ends at once
        # Unless a thread is inside `next()` (it then ends the flow itself, at once), the flow ends here.
        if self._iterating.acquire(blocking=False):
            try:
                self._items.close()
            finally:
                self._iterating.release()

    @property
    def closed(self) -> bool:
        return self._stop.is_set()

    def __enter__(self) -> BlockingStream[E]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _HeldStream:
    """The open answer of a flow's streaming `Send`, read line by line. `abort` (from any thread) shuts its
    connection down, so that a read under way ends at once, and any later answer is closed as it comes."""

    def __init__(self) -> None:
        self.response: httpx.Response | None = None
        self.lines: Iterator[str] = iter(())
        self._lock = threading.Lock()
        self._aborted = False

    def open(self, response: httpx.Response) -> httpx.Response:
        """Holds a 200 answer open; reads any other whole (an error to parse) and closes it."""
        if response.status_code != 200:
            try:
                response.read()
            finally:
                response.close()
            return response
        with self._lock:
            self.response, self.lines = response, response.iter_lines()
            if self._aborted:
                _shut_down(response)
        return response

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            if self.response is not None:
                _shut_down(self.response)

    def next_line(self) -> str | None:
        """The next line; None at the end. The stream is closed at its end and when a read fails."""
        try:
            line = next(self.lines, None)
        except BaseException:
            self.close()
            raise
        if line is None:
            self.close()
        return line

    def close(self) -> None:
        with self._lock:
            response, self.response, self.lines = self.response, None, iter(())
        if response is not None:
            response.close()


def _shut_down(response: httpx.Response) -> None:
    """Shuts the answer's connection down (not only closes it: a thread blocked reading it wakes up)."""
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            # The plain socket's shutdown, also under TLS: `SSLSocket.shutdown` would drop its TLS object
            # under the reading thread's feet.
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


class BlockingRecipe:
    """A recipe's flows run by the blocking client it was given."""

    client: Client

    def run_flow(self, flow: Flow[T]) -> T:
        return self.client.run_flow(flow)

    def iterate_flow(self, stream: Stream[E]) -> BlockingStream[E]:
        return self.client.iterate_flow(stream)


class Session(session_flows.SessionBase):
    """A TTL session that a daemon thread keeps alive (a keepalive every third of the TTL) while another
    watches its clock; see `SessionBase`. `expired` is a `threading.Event`."""

    expired: threading.Event

    def __init__(
        self,
        client: Client,
        info: SessionInfo,
        ttl: float,
        on_expired: Callable[[], None] | None = None,
        created_at: float | None = None,
        safety_margin: float | None = None,
    ) -> None:
        super().__init__(info, ttl, threading.Event(), on_expired, created_at, safety_margin)
        self.client = client
        self._stop = threading.Event()
        flows = {"session": session_flows.keep_alive(client, self), "session-clock": session_flows.watch_clock(self)}
        self._threads = [
            threading.Thread(target=client.run_flow, args=(flow, self._stop), name=f"{name}-{self.id}", daemon=True)
            for name, flow in flows.items()
        ]
        for thread in self._threads:
            thread.start()

    def stop_keepalive(self) -> None:
        """Stops the keepalives (and the watch of the clock); the session then expires after its TTL."""
        self._stop.set()
        for thread in self._threads:
            if threading.current_thread() is not thread:
                thread.join(self.client.request_timeout + self.client.retry_timeout)

    def end(self) -> None:
        """Ends the session (its ephemeral keys go with it) and stops the keepalives: `ended`."""
        self.stop_keepalive()
        self.client.run_flow(session_flows.end(self.client, self))

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.end()
