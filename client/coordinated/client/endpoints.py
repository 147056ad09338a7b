"""The sidecar addresses a client may use, which one is in use, and what a failed attempt means.

The client sends to one address at a time: the master's once it knows which address that is (a follower
would forward the request there anyway), otherwise the first one. When an address fails (no connection, a
503) it moves on to the next and then looks for the master again. The failure rules are in `failure`:
a call the cluster certainly did not apply is retried; one it may have applied is retried only if
repeating it is harmless (`Retry.ALWAYS`), otherwise the caller gets `OutcomeUnknown`.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from coordinated.client.calls import NO_BODY, NOT_APPLIED_503, Call, Retry
from coordinated.client.errors import CoordinatedError, NoNodeAvailable, OutcomeUnknown, api_error

DEFAULT_ADDRESS = "http://127.0.0.1:9200"  # the sidecar's loopback listener in the application's pod


def from_environment(environ: Mapping[str, str] | None = None) -> tuple[list[str], str | None]:
    """The addresses (`COORDINATED_URL`, a comma list) and token (`COORDINATED_TOKEN`) that the operator
    gives the containers of a cluster's pods."""
    env = os.environ if environ is None else environ
    urls = [url for url in env.get("COORDINATED_URL", DEFAULT_ADDRESS).split(",") if url.strip()]
    return urls or [DEFAULT_ADDRESS], env.get("COORDINATED_TOKEN") or None


class Retryable(Exception):
    """An attempt that failed without effect (or harmlessly): try again, elsewhere. `error` is what the
    caller gets if every retry fails too."""

    def __init__(self, error: CoordinatedError) -> None:
        super().__init__(str(error))
        self.error = error


def normalize(address: str) -> str:
    address = address.strip().rstrip("/")
    if not address:
        raise ValueError("an empty sidecar address")
    return address if "://" in address else f"http://{address}"


class Endpoints:
    def __init__(self, addresses: str | Sequence[str], follow_master: bool = True) -> None:
        listed = [addresses] if isinstance(addresses, str) else list(addresses)
        if not listed:
            raise ValueError("give at least one sidecar address")
        self.addresses = [normalize(address) for address in listed]
        self.names: dict[str, str] = {}  # address -> node name, learned when looking for the master
        self._index = 0
        self._lock = threading.Lock()  # a session's keepalive thread shares the client
        self.follow_master = follow_master and len(self.addresses) > 1
        self.find_master = self.follow_master

    @property
    def current(self) -> str:
        return self.addresses[self._index]

    def failed(self, address: str) -> None:
        with self._lock:
            if self.addresses[self._index] == address:
                self._index = (self._index + 1) % len(self.addresses)
                self.find_master = self.follow_master

    def use_node(self, name: str) -> None:
        with self._lock:
            for index, address in enumerate(self.addresses):
                if self.names.get(address) == name:
                    self._index = index
                    return


def decode(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return response.text


def failure(call: Call[Any], address: str, error: BaseException | None, status: int = 0, body: Any = None) -> Exception:
    """What a failed attempt (a transport error, or a 503) means: `Retryable` or `OutcomeUnknown`."""
    if isinstance(error, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        return Retryable(NoNodeAvailable(f"cannot reach {address}: {error!r}"))
    if error is not None:
        if call.retry is Retry.NEVER_BLIND:
            return OutcomeUnknown(f"{call.method} {call.path} via {address} may or may not have taken effect", error)
        return Retryable(NoNodeAvailable(f"no answer from {address}: {error!r}"))
    api = api_error(status, body)
    api.address = address
    if api.type not in NOT_APPLIED_503 and call.retry is Retry.NEVER_BLIND:
        return OutcomeUnknown(f"{call.method} {call.path} via {address} may or may not have taken effect: {api}", api)
    return Retryable(api)


def timeout_for(call: Call[Any], request_timeout_s: float) -> httpx.Timeout:
    return httpx.Timeout(request_timeout_s + call.wait_s, connect=min(request_timeout_s, 5.0))


def body_of(call: Call[Any]) -> bytes | None:
    """The call's body as JSON (UTF-8, no NaN or infinity, which JSON cannot carry)."""
    if call.body is NO_BODY:
        return None
    return json.dumps(call.body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
