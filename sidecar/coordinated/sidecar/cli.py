"""`coordinated node`: run one sidecar node in the foreground until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import ssl
import sys

import click
from aiohttp import web

from coordinated.coordination import feature_gates
from coordinated.coordination.settings import SettingsError
from coordinated.programs import run_program
from coordinated.sidecar.config import NodeConfig
from coordinated.sidecar.event_loop import loop_factory
from coordinated.sidecar.node import Node
from coordinated.sidecar.node_settings import build_config
from coordinated.sidecar.peers.receiver import transport_app
from coordinated.sidecar.peers.tls import ReloadingContext
from coordinated.sidecar.peers.tls_settings import HTTP_TLS, TRANSPORT_TLS, Side, TlsSettings
from coordinated.sidecar.peers.transport_settings import TRANSPORT_MAX_CHUNK_SIZE
from coordinated.sidecar.storage.persistence import DataDirError
from coordinated.sidecar.web.app import client_app
from coordinated.sidecar.web.http_server import ClientAppRunner
from coordinated.sidecar.web.https_site import HttpsSite

EXIT_SETTINGS = 2
EXIT_DATA_DIR = 3
EXIT_BIND = 4
# The largest peer message, whole (a POST of an older version) or reassembled from chunks: a full state can be
# large (cluster.metadata.max_state_size is 256mb by default). Frames are limited by transport.max_chunk_size.
TRANSPORT_MAX_BODY = 512 * 1024 * 1024
HANDOVER_WAIT_S = 2.0
LOOPBACK = "127.0.0.1"
# A host whose listener already takes loopback connections, or is loopback itself.
UNSPECIFIED_OR_LOOPBACK = ("127.0.0.1", "localhost", "0.0.0.0", "::", "")

log = logging.getLogger("coordinated.cli")


def listening_context(config: NodeConfig, port: TlsSettings) -> ssl.SSLContext | None:
    """The server context of a port with TLS (reloaded from disk per new connection), or None."""
    files = port.files(config.settings)
    return ReloadingContext(files, Side.SERVER).listening_context() if files is not None else None


# The cyclic garbage collector's first-generation threshold (CPython's default is 700 allocations). Almost
# everything a node allocates per request is freed by reference counting; at the default, collections ran about
# once per 50 writes at 64 clients and, with the full collections they lead to (18-21 ms each, scanning every
# object the node holds), took about 5 % of the nodes' CPU.
GC_THRESHOLDS = (10_000, 10, 10)


def tune_garbage_collector() -> None:
    """Once the node has started: what exists now (modules, the app, the state loaded from disk) is moved out of
    the collector's sight (`gc.freeze`; reference counting still frees it), and collections run less often."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def parse_e_option(option: str) -> tuple[str, str]:
    name, sep, value = option.partition("=")
    if not sep or not name.strip():
        raise SettingsError(f"-E expects key=value, got [{option}]")
    return name.strip(), value


def add_test_request_gates() -> None:
    """The test hook `COORDINATED_TEST_REQUEST_GATES=op:feature,...` (feature_gates.test_gates): gates that a mixed
    cluster's tests need before this release has a gated request of its own."""
    spec = os.environ.get("COORDINATED_TEST_REQUEST_GATES", "")
    if spec:
        feature_gates.REQUEST_GATES += feature_gates.test_gates(spec)


@click.command("node", help=__doc__, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--name", required=True, help="node name (node.name)")
@click.option("--data-dir", required=True, help="directory for the node id, state and history")
@click.option("--host", default="127.0.0.1", help="address to bind and publish (default 127.0.0.1)")
@click.option("--http-port", type=int, default=9200, help="client API port (default 9200)")
@click.option("--transport-port", type=int, default=9300, help="peer transport port (default 9300)")
@click.option("-E", "settings", multiple=True, metavar="KEY=VALUE", help="a setting")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info")
def node_command(
    name: str, data_dir: str, host: str, http_port: int, transport_port: int, settings: tuple[str, ...], log_level: str
) -> int:
    add_test_request_gates()
    logging.basicConfig(
        level=getattr(logging, log_level.upper()),
        format=f"%(asctime)s %(levelname)-7s [{name}] %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        overrides: dict[str, str] = {}
        for option in settings:
            setting, value = parse_e_option(option)
            if setting in overrides:
                raise SettingsError(f"setting [{setting}] is given more than once")
            overrides[setting] = value
        config = build_config(
            name=name,
            data_dir=data_dir,
            host=host,
            http_port=http_port,
            transport_port=transport_port,
            overrides=overrides,
        )
    except SettingsError as error:
        print(f"coordinated node: error: {error}", file=sys.stderr)
        return EXIT_SETTINGS
    try:
        node = Node(config)
    except DataDirError as error:
        print(f"coordinated node: error: refusing to start: {error}", file=sys.stderr)
        return EXIT_DATA_DIR
    try:
        with asyncio.Runner(loop_factory=loop_factory(config.settings)) as runner:
            return runner.run(serve(node, config))
    except KeyboardInterrupt:
        return 0


def main(argv: list[str] | None = None) -> int:
    return run_program(node_command, argv, "coordinated node")


def client_site(runner: web.BaseRunner, config: NodeConfig) -> web.TCPSite:
    """With TLS on, a plain-HTTP request gets a 400 that says to use https (https_site.py), not a closed socket."""
    context = listening_context(config, HTTP_TLS)
    if context is None:
        return web.TCPSite(runner, config.host, config.http_port, reuse_address=True)
    return HttpsSite(runner, config.host, config.http_port, ssl_context=context)


async def serve(node: Node, config: NodeConfig) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    max_body = TRANSPORT_MAX_BODY
    transport_runner = web.AppRunner(
        transport_app(
            node.handle_message,
            node.auth,
            max_body,
            max_chunk_size=config.settings[TRANSPORT_MAX_CHUNK_SIZE],
            current_term=node.current_term,
            refusals=node.refusals,
            local_address=config.transport_address,
            trust=node.transport_trust,
            version=node.version,
            on_undecodable=node.handle_undecodable,
        ),
        access_log=None,
        handle_signals=False,
    )
    client_runner = ClientAppRunner(client_app(node, node.authentication))
    await transport_runner.setup()
    await client_runner.setup()
    sites = [
        web.TCPSite(
            transport_runner,
            config.host,
            config.transport_port,
            reuse_address=True,
            ssl_context=listening_context(config, TRANSPORT_TLS),
        ),
        client_site(client_runner, config),
    ]
    try:
        for site in sites:
            await site.start()
        if config.host not in UNSPECIFIED_OR_LOOPBACK:
            # For applications in the pod and `kubectl port-forward`: plain HTTP, the same tokens. A convenience:
            # without it (no loopback interface, the port taken there) the node still runs.
            loopback = web.TCPSite(client_runner, LOOPBACK, config.http_port, reuse_address=True)
            try:
                await loopback.start()
                sites.append(loopback)
            except OSError as error:
                log.warning("no client listener on %s:%d: %s", LOOPBACK, config.http_port, error.strerror or error)
    except OSError as error:
        print(f"coordinated node: error: cannot listen on {config.host}: {error.strerror or error}", file=sys.stderr)
        await client_runner.cleanup()
        await transport_runner.cleanup()
        node.close_unstarted()
        return EXIT_BIND
    await node.start()
    tune_garbage_collector()
    log.info(
        "node %s (%s) started: %s, transport %s%s",
        config.node_name,
        node.node_id,
        ", ".join(site.name for site in sites[1:]),
        config.transport_address,
        " (mutual TLS)" if config.settings[TRANSPORT_TLS.enabled] else "",
    )
    await stop.wait()
    log.info("stopping")
    # Stop accepting clients first, hand over (a master picks a successor), then close the transport.
    await client_runner.cleanup()
    await node.stop(HANDOVER_WAIT_S)
    await transport_runner.cleanup()
    log.info("stopped")
    return 0
