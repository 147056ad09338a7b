"""What both clients share: their settings, their addresses, and the flow that sends one call with retries.

`perform` is the one place where a call meets the network: it follows the master among the addresses,
retries what may be retried (`endpoints.failure` says what), backs off with tenacity's exponential backoff
and full jitter, and gives up after `retry_timeout`. tenacity is driven step by step here (its `iter`,
as its own `Retrying.__iter__` does), so that the pauses are `Sleep` steps that either driver performs.
"""

from __future__ import annotations

import os
import ssl
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, Self, TypedDict, TypeVar

import httpx

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
from coordinated.client.errors import ApiError, CoordinatedError, Unavailable
from coordinated.client.flow import Flow, Send, Sleep
from coordinated.client.token_file import TokenFile, default_token_file, environment_token_file

T = TypeVar("T")

# How long finding the master may take per address: it is an optimization, never worth a long wait.
FIND_MASTER_TIMEOUT_S = 2.0


class ClientOptions(TypedDict, total=False):
    """The options of `Client` and `AsyncClient` (see `ClientBase`)."""

    token: str | None
    token_file: str | os.PathLike[str] | None
    verify: bool | str | ssl.SSLContext
    cert: str | tuple[str, str] | None
    request_timeout: float
    retry_timeout: float
    follow_master: bool
    master_timeout: float | None
    server_hostname: str | None
    headers: Mapping[str, str] | None


class ClientBase:
    """The settings and the address state of a client; `Client` and `AsyncClient` add a driver.

    `addresses`: one sidecar (in a pod, its loopback listener, the default) or several; the client follows
    the master among them and fails over when one stops answering. `token`: a bearer token (the
    `<cluster>-client` Secret on Kubernetes); or `token_file`, a file that holds it, re-read when it changes (a
    projected ServiceAccount token, which the kubelet renews). Without either, the client sends the token of
    `token_file.DEFAULT_TOKEN_FILE` when that file exists (an application pod's projected token for the
    cluster), else none. `verify`/`cert`: TLS, as httpx takes them (a CA bundle path or
    an `ssl.SSLContext`; a client certificate). `server_hostname`: the name to check the server's
    certificate against, when the address is an IP that the certificate does not name. `headers`: sent with
    every request (a proxy's, say), beside the token's `Authorization`. Calls that fail
    with a 503 or without a connection are retried with exponential backoff and jitter for up to
    `retry_timeout` seconds (0: one attempt). With `follow_master=False` the client stays on one address
    until that fails (a follower forwards writes to the master itself). `master_timeout`: how long the
    cluster may take over a call before it answers 503 (the server's default is 30 s).
    """

    def __init__(
        self,
        addresses: str | Sequence[str] = DEFAULT_ADDRESS,
        *,
        token: str | None = None,
        token_file: str | os.PathLike[str] | None = None,
        verify: bool | str | ssl.SSLContext = True,
        cert: str | tuple[str, str] | None = None,
        request_timeout: float = 10.0,
        retry_timeout: float = 30.0,
        follow_master: bool = True,
        master_timeout: float | None = None,
        server_hostname: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.endpoints = Endpoints(addresses, follow_master)
        self.request_timeout = request_timeout
        self.retry_timeout = retry_timeout
        self.master_timeout = None if master_timeout is None else calls.duration(master_timeout, "master_timeout")
        self.verify = verify
        self.cert = cert
        if token and token_file:
            raise ValueError("give a token or a token file, not both")
        if not token and not token_file:
            token_file = default_token_file()
        self.token_file = TokenFile(token_file) if token_file else None  # ValueError when it holds no token
        self._headers: Mapping[str, str] = {
            **(headers or {}),
            **({"Authorization": f"Bearer {token}"} if token else {}),
        }
        self._extensions: Mapping[str, Any] = {"sni_hostname": server_hostname} if server_hostname else {}

    @classmethod
    def from_env(cls, **options: Any) -> Self:
        """From `COORDINATED_URL` (default: the loopback listener) and `COORDINATED_TOKEN` (as the operator sets
        them in the cluster's pods), or `COORDINATED_TOKEN_FILE` (a file that holds the token, re-read when it
        changes); without either, the pod's projected token at `DEFAULT_TOKEN_FILE` if there is one."""
        addresses, token = from_environment()
        if "token" not in options and "token_file" not in options:
            options = {**options, "token": token, "token_file": None if token else environment_token_file()}
        return cls(addresses, **options)

    def request_options(self, send: Send) -> dict[str, Any]:
        """The keyword arguments of `httpx.Client.request` (and of `httpx.AsyncClient.request`) for a step."""
        headers = dict(self._headers)
        if self.token_file is not None:
            headers["Authorization"] = f"Bearer {self.token_file.current()}"
        if send.body is not None:
            headers["Content-Type"] = "application/json"
        return {
            "params": send.params,
            "content": send.body,
            "headers": headers,
            "timeout": send.timeout,
            "extensions": self._extensions,
        }


def attempt(
    client: ClientBase, address: str, call: calls.Call[T], timeout_s: float | None = None, *, moves_on_503: bool = True
) -> Flow[T]:
    """One attempt at one address. A failure of the attempt itself (no connection, no answer, a 503) raises
    `Retryable` or `OutcomeUnknown`, and moves the client to its next address (for a 503, unless not
    `moves_on_503`); an answer is parsed by the call (which raises the API's errors)."""
    params = dict(call.params)
    if call.master_timeout and client.master_timeout is not None:
        params["master_timeout"] = client.master_timeout
    send = Send(
        call.method,
        address + call.path,
        params,
        body_of(call),
        timeout_for(call, timeout_s or client.request_timeout),
        call.stream,
    )
    try:
        response: httpx.Response = yield send
    except httpx.TransportError as error:
        client.endpoints.failed(address)
        raise failure(call, address, error) from error
    if call.stream and response.status_code == 200:
        return call.parse(200, response.headers)  # the body is the held stream, for the flow's `ReadLine` steps
    body = decode(response)
    if response.status_code == 503:
        if moves_on_503:
            client.endpoints.failed(address)
        raise failure(call, address, None, 503, body)
    return call.parse(response.status_code, body)


def find_master(client: ClientBase) -> Flow[None]:
    """Use the master's address if it is among ours, learning the addresses' node names on the way."""
    endpoints = client.endpoints
    endpoints.find_master = False
    try:
        # A node without a master stays the one to send to: the call's own answer will say so.
        master = yield from attempt(
            client, endpoints.current, calls.cat_master(), FIND_MASTER_TIMEOUT_S, moves_on_503=False
        )
    except Retryable as failed:
        if isinstance(failed.error, Unavailable) and failed.error.no_master():
            # An election is under way: look again at the next call. The call itself may succeed through
            # this node (a follower forwards once it knows the master), which would otherwise keep the client
            # on a follower until an address fails.
            endpoints.find_master = endpoints.follow_master
        return
    except CoordinatedError:
        return
    if master is None:
        return
    for address in endpoints.addresses:
        if address not in endpoints.names:
            try:
                name = yield from attempt(client, address, calls.node_name(), FIND_MASTER_TIMEOUT_S)
            except (Retryable, CoordinatedError):
                continue
            if name is not None:
                endpoints.names[address] = name
    endpoints.use_node(master)


def attempt_here(client: ClientBase, call: calls.Call[T]) -> Flow[T]:
    """One attempt where the client sends now: the master's address once it is found."""
    if client.endpoints.find_master:
        yield from find_master(client)
    return (yield from attempt(client, client.endpoints.current, call))


def perform(client: ClientBase, call: calls.Call[T]) -> Flow[T]:
    """Runs one call with retries; raises the call's ApiError, OutcomeUnknown, or the failure that says most:
    the last answer of a node (a 503: no master, say) if any node answered, else the last failure.

    The first attempt goes out at once; tenacity takes over only after it failed (most calls succeed at
    the first attempt, and tenacity's bookkeeping costs about as much as the request's own; a short-lived
    program, such as the command line, does not even import it then)."""
    started = time.monotonic()
    try:
        return (yield from attempt_here(client, call))
    except Retryable as failed:
        first = failed
    answered = first.error if isinstance(first.error, ApiError) else None
    from tenacity import (
        DoAttempt,
        DoSleep,
        RetryCallState,
        Retrying,
        retry_if_exception_type,
        stop_after_delay,
        wait_random_exponential,
    )

    retrying = Retrying(
        stop=stop_after_delay(client.retry_timeout - (time.monotonic() - started)),
        wait=wait_random_exponential(multiplier=0.05, max=1.0),
        retry=retry_if_exception_type(Retryable),
        reraise=True,
    )
    retrying.begin()
    state = RetryCallState(retrying, fn=None, args=(), kwargs={})
    state.set_exception((type(first), first, first.__traceback__))
    while True:
        try:
            action = retrying.iter(state)
        except Retryable as retryable:  # out of time: the failure that says most, as the caller knows it
            if answered is not None and not isinstance(retryable.error, ApiError):
                raise answered from retryable.error
            raise retryable.error from retryable.__cause__
        if isinstance(action, DoAttempt):
            try:
                result = yield from attempt_here(client, call)
            except Retryable as failed:
                if isinstance(failed.error, ApiError):
                    answered = failed.error
                state.set_exception(sys.exc_info())  # type: ignore[arg-type]  # Retryable is an exception
            else:
                state.set_result(result)
        elif isinstance(action, DoSleep):
            state.prepare_for_next_attempt()
            yield Sleep(float(action))
        else:
            return action  # type: ignore[no-any-return]  # the result set above
