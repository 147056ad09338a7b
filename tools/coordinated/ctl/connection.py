"""The connection options every client command takes, and the `Client` they make.

Endpoints come from `--endpoints` or `COORDINATED_ENDPOINTS` (a comma list), else from the cluster that
`coordinated local up` started, else the sidecar's loopback listener (http://127.0.0.1:9200). The token and
the CA bundle come from `--token`/`COORDINATED_TOKEN` and `--cacert`/`COORDINATED_CACERT`.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import click
import httpx

from coordinated.client import Client
from coordinated.client.endpoints import DEFAULT_ADDRESS, normalize
from coordinated.ctl.failures import BadInput, as_exit_codes
from coordinated.ctl.output import output_option

P = ParamSpec("P")
R = TypeVar("R")

# How long a command keeps retrying a cluster that does not answer (no connection, no master).
DEFAULT_TIMEOUT_S = 15.0

# The click context's `meta` key of a `Preset`: set by a caller that runs these commands against a cluster it
# found itself (the kubectl plugin), it replaces --endpoints, --token and --cacert.
PRESET_KEY = "coordinated.ctl.preset"


@dataclass(frozen=True)
class Preset:
    """Where to send a command's calls, found by its caller: the endpoints, the token and the HTTP client that
    reaches them (the kubectl plugin's goes through port-forwards)."""

    endpoints: list[str]
    token: str | None
    http: httpx.Client


@dataclass(frozen=True)
class Connection:
    endpoints: list[str]
    token: str | None
    verify: bool | ssl.SSLContext
    timeout: float
    output: str
    http: httpx.Client | None = None

    def client(self, addresses: list[str] | None = None, *, retry: bool = True) -> Client:
        """A client of the endpoints (or of `addresses`); without `retry`, one attempt per call. It does not
        look for the master among the endpoints (a request to each): the endpoint it uses forwards to the
        master what needs it, which costs a command of a few calls less."""
        return Client(
            addresses or self.endpoints,
            token=self.token,
            verify=self.verify,
            request_timeout=min(self.timeout, 10.0) if self.timeout > 0 else 10.0,
            retry_timeout=self.timeout if retry else 0,
            follow_master=False,
            http=self.http,
        )


def checked_endpoint(address: str) -> str:
    """The address as the client takes it (`host:port` means http://), or BadInput naming what is wrong."""
    endpoint = normalize(address)
    try:
        url = httpx.URL(endpoint)
    except httpx.InvalidURL as error:
        raise BadInput(f"--endpoints: [{address.strip()}] is not a URL: {error}") from error
    if url.scheme not in ("http", "https") or not url.host:
        raise BadInput(f"--endpoints: [{address.strip()}] is not an http:// or https:// address with a host")
    return endpoint


def endpoints_from(given: str | None) -> list[str]:
    if given is not None:
        endpoints = [checked_endpoint(address) for address in given.split(",") if address.strip()]
        if not endpoints:
            raise BadInput("--endpoints: give at least one address, such as https://10.0.0.1:9200")
        return endpoints
    from coordinated.ctl.localstate import local_dir, read_record  # msgspec: only without --endpoints

    record = read_record(local_dir())
    return record.endpoints if record is not None else [DEFAULT_ADDRESS]


def verify_from(cacert: str | None) -> bool | ssl.SSLContext:
    if cacert is None:
        return True
    try:
        return ssl.create_default_context(cafile=cacert)
    except (OSError, ssl.SSLError, ValueError) as error:
        raise BadInput(f"--cacert {cacert}: not a readable PEM CA bundle ({error})") from error


def connection_options(command: Callable[..., R]) -> Callable[..., R]:
    """Adds the connection and output options to a command, which gets them as `connection`, and turns what
    the client raises into the documented exit codes."""

    @click.option("--endpoints", envvar="COORDINATED_ENDPOINTS", help="sidecar URLs, comma separated")
    @click.option("--token", envvar="COORDINATED_TOKEN", help="bearer token (the cluster's client or admin token)")
    @click.option(
        "--cacert",
        envvar="COORDINATED_CACERT",
        type=click.Path(exists=True, dir_okay=False),
        help="CA bundle that signed the sidecars' certificates",
    )
    @click.option(
        "--timeout",
        envvar="COORDINATED_TIMEOUT",
        type=click.FloatRange(min=0),
        default=DEFAULT_TIMEOUT_S,
        show_default=True,
        help="seconds to keep retrying an unreachable cluster (0: one attempt)",
    )
    @output_option
    @functools.wraps(command)
    def wrapper(
        endpoints: str | None, token: str | None, cacert: str | None, timeout: float, output: str, **kwargs: Any
    ) -> R:
        preset = click.get_current_context().meta.get(PRESET_KEY)
        if isinstance(preset, Preset):
            connection = Connection(preset.endpoints, preset.token, False, timeout, output, preset.http)
        else:
            addresses = endpoints_from(endpoints)
            # Without an https endpoint nothing is verified: skip loading the CA store (a third of a call's time).
            verify = verify_from(cacert) if any(a.startswith("https://") for a in addresses) else False
            connection = Connection(addresses, token or None, verify, timeout, output)
        with as_exit_codes():
            return command(connection=connection, **kwargs)

    return wrapper
