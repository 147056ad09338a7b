"""The blocking client (`Client`) and its sessions with a background keepalive thread."""

from __future__ import annotations

import contextlib
import logging
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import httpx
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_random_exponential

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


class Client:
    """A client of the sidecars' key-value API.

    `addresses`: one sidecar (in a pod, its loopback listener, the default) or several; the client follows
    the master among them and fails over when one stops answering. `token`: a bearer token (the
    `<cluster>-client` Secret on Kubernetes). `verify`/`cert`: TLS, as httpx takes them (a CA bundle path or
    an `ssl.SSLContext`; a client certificate). Calls that fail with a 503 or without a connection are
    retried with exponential backoff and jitter for up to `retry_timeout` seconds. With `follow_master=False`
    it stays on one address until that fails (a follower forwards writes to the master itself).
    """

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
        self._http = httpx.Client(headers=headers, verify=verify, cert=cert)
        self._sessions: weakref.WeakSet[Session] = weakref.WeakSet()

    @classmethod
    def from_env(cls, **options: Any) -> Client:
        """From `COORDINATED_URL` (default: the loopback listener) and `COORDINATED_TOKEN`, as the operator
        sets them in the cluster's pods."""
        addresses, token = from_environment()
        return cls(addresses, token=token, **options)

    def close(self) -> None:
        """Stops the keepalives of this client's sessions (without ending them) and closes its connections."""
        for session in list(self._sessions):
            session.stop_keepalive()
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sending ----------------------------------------------------------------------------------------

    def _send(self, address: str, call: calls.Call[T], timeout_s: float | None = None) -> T:
        """One attempt at one address; raises Retryable or OutcomeUnknown on a failure of the attempt."""
        try:
            response = self._http.request(
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

    def _find_master(self) -> None:
        """Use the master's address if it is among ours (learning their node names on the way)."""
        endpoints = self.endpoints
        endpoints.find_master = False
        try:
            master = self._send(endpoints.current, calls.cat_master(), timeout_s=2.0)
        except (Retryable, CoordinatedError):
            return
        if master is None:
            return
        for address in endpoints.addresses:
            if address not in endpoints.names:
                try:
                    name = self._send(address, calls.node_name(), timeout_s=2.0)
                except (Retryable, CoordinatedError):
                    continue
                if name is not None:
                    endpoints.names[address] = name
        endpoints.use_node(master)

    def call(self, call: calls.Call[T]) -> T:
        """Runs one call with retries; raises the call's ApiError, OutcomeUnknown, or the last failure."""
        retrying = Retrying(
            stop=stop_after_delay(self.retry_timeout),
            wait=wait_random_exponential(multiplier=0.05, max=1.0),
            retry=retry_if_exception_type(Retryable),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    if self.endpoints.find_master:
                        self._find_master()
                    return self._send(self.endpoints.current, call)
        except Retryable as retryable:
            raise retryable.error from retryable.__cause__
        raise AssertionError("unreachable: tenacity either returns or raises")

    # -- keys -------------------------------------------------------------------------------------------

    def get(self, key: str, *, local: bool = False) -> KeyValue:
        """Linearizable unless `local` (this node's applied state). Raises NotFound."""
        return self.call(calls.get(key, local))

    def put(self, key: str, value: Any, *, session: str | None = None) -> WriteResult:
        """An unconditional write (retried if its outcome is unknown: writing the same value twice is harmless).
        With `session` the key is ephemeral: deleted when the session ends."""
        return self.call(calls.put(key, value, session=session))

    def create(self, key: str, value: Any, *, session: str | None = None) -> WriteResult:
        """Writes only if the key does not exist; raises VersionConflict if it does."""
        return self.call(calls.put(key, value, create=True, session=session))

    def cas(self, key: str, value: Any, version: int, *, session: str | None = None) -> WriteResult:
        """Writes only if the key's version is `version` (0: absent); raises VersionConflict otherwise."""
        return self.call(calls.put(key, value, if_version=version, session=session))

    def delete(self, key: str, *, if_version: int | None = None) -> WriteResult:
        return self.call(calls.delete(key, if_version=if_version))

    def txn(
        self,
        compare: Sequence[tuple[str, int]],
        success: Sequence[Mapping[str, Any]],
        failure: Sequence[Mapping[str, Any]] = (),
    ) -> TxnResult:
        """All or nothing in one committed state; build ops with `put_op`, `delete_op`, `get_op`."""
        return self.call(calls.txn(compare, success, failure))

    # -- watches ----------------------------------------------------------------------------------------

    def watch_once(
        self, prefix: str = "", after_version: int | None = None, *, timeout: float = 30.0, local: bool = False
    ) -> WatchBatch:
        """One long poll: the changes after `after_version` (None: from now), or none after `timeout`."""
        return self.call(calls.watch(prefix, after_version, timeout, local))

    def watch(
        self, prefix: str = "", after_version: int | None = None, *, timeout: float = 30.0, local: bool = False
    ) -> Iterator[WatchEvent]:
        """Every change under `prefix`, for ever, resuming from the last version it reported, through any
        node. If it falls behind a node's change log (410) it re-reads the prefix and yields a `reset`
        event followed by a `put` of every key there."""
        after = after_version
        while True:
            try:
                batch = self.watch_once(prefix, after, timeout=timeout, local=local)
            except ChangesGone:
                version, values = self.call(calls.snapshot(prefix))
                yield from calls.reset_events(prefix, version, values)
                after = version
                continue
            yield from batch.events
            after = batch.version

    # -- sessions ---------------------------------------------------------------------------------------

    def create_session(self, ttl: float | None = None, *, node: str | None = None) -> SessionInfo:
        return self.call(calls.create_session(ttl, node))

    def keepalive(self, session_id: str) -> None:
        """Raises SessionNotFound once the session has ended."""
        self.call(calls.keepalive(session_id))

    def end_session(self, session_id: str) -> None:
        self.call(calls.end_session(session_id))

    def sessions(self) -> Any:
        return self.call(calls.list_sessions())

    def session(self, ttl: float = 10.0, on_expired: Callable[[], None] | None = None) -> Session:
        """A TTL session kept alive in the background until `end()` (or the end of a `with` block)."""
        session = Session(self, self.create_session(ttl), ttl, on_expired)
        self._sessions.add(session)
        return session


class Session:
    """A TTL session that a daemon thread keeps alive (a keepalive every third of the TTL).

    `expired` is set once the cluster has said the session ended. Until then the session may still have
    ended: the cluster decides, on the master's clock. See docs/applications.md on what that means for locks.
    """

    def __init__(
        self, client: Client, info: SessionInfo, ttl: float, on_expired: Callable[[], None] | None = None
    ) -> None:
        self.client = client
        self.id = info.id
        self.ttl = ttl
        self.expired = threading.Event()
        self.renewed_at = time.monotonic()
        self._on_expired = on_expired
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep_alive, name=f"session-{self.id}", daemon=True)
        self._thread.start()

    def _keep_alive(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                self.client.keepalive(self.id)
                self.renewed_at = time.monotonic()
            except SessionNotFound:
                self._mark_expired()
                return
            except CoordinatedError as error:
                log.warning("keepalive of session %s failed: %s", self.id, error)

    def _mark_expired(self) -> None:
        self.expired.set()
        if self._on_expired is not None:
            self._on_expired()

    def stop_keepalive(self) -> None:
        """Stops the keepalives; the session then expires after its TTL."""
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(self.client.request_timeout + self.client.retry_timeout)

    def end(self) -> None:
        """Ends the session (its ephemeral keys go with it) and stops the keepalives."""
        self.stop_keepalive()
        if not self.expired.is_set():
            with contextlib.suppress(SessionNotFound):
                self.client.end_session(self.id)
            self.expired.set()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.end()
