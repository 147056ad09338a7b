"""Run sidecar node processes on 127.0.0.1: shared by the demo, the integration tests and the benchmarks.

Every process is tracked by PID and `stop_all` ends exactly those, so a Ctrl-C or a failed test never
leaves nodes behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinated.client import Client, CoordinatedError

# Short timeouts so tests and the demo notice failures quickly.
FAST_SETTINGS = {
    "cluster.fault_detection.leader_check.interval": "200ms",
    "cluster.fault_detection.leader_check.timeout": "500ms",
    "cluster.fault_detection.leader_check.retry_count": "2",
    "cluster.fault_detection.follower_check.interval": "200ms",
    "cluster.fault_detection.follower_check.timeout": "500ms",
    "cluster.fault_detection.follower_check.retry_count": "2",
    "discovery.find_peers_interval": "200ms",
    "cluster.publish.timeout": "5s",
    "cluster.follower_lag.timeout": "5s",
    "transport.request_timeout": "2s",
}


def free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class HttpError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body


def http(
    method: str,
    url: str,
    body: Any = None,
    timeout: float = 10.0,
    raw: bytes | None = None,
    headers: dict[str, str] | None = None,
    context: ssl.SSLContext | None = None,
) -> tuple[int, Any]:
    """(status, decoded JSON or text); never raises for an HTTP error status. A raw request, for tests of the
    HTTP API itself (statuses, bodies, malformed input); calls of the API go through `LocalNode.client`."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    request = urllib.request.Request(url, data=data, method=method, headers=all_headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            status, payload = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, payload = error.code, error.read()
    text = payload.decode("utf-8", "replace")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


@dataclass
class LocalNode:
    name: str
    data_dir: Path
    http_port: int
    transport_port: int
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    extra: list[str] = field(default_factory=list)
    host: str = "127.0.0.1"
    # Prepended to the node's command line, e.g. `ip netns exec NS` (it execs, so the PID stays the node's).
    argv_prefix: list[str] = field(default_factory=list)
    # With TLS on the client port: the client context to reach it; and headers such as a bearer token.
    ssl_context: ssl.SSLContext | None = None
    headers: dict[str, str] = field(default_factory=dict)
    # The Python that runs the node: this tree's, or another release's (coordinated.tools.previous_release).
    python: str = sys.executable
    _client: Client | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://{self.host}:{self.http_port}"

    @property
    def transport_address(self) -> str:
        return f"{self.host}:{self.transport_port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def get(self, path: str, timeout: float = 10.0) -> tuple[int, Any]:
        return self.request("GET", path, timeout=timeout)

    def put(self, path: str, body: Any = None, timeout: float = 10.0) -> tuple[int, Any]:
        return self.request("PUT", path, body, timeout=timeout)

    def request(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> tuple[int, Any]:
        return http(method, self.url + path, body, timeout=timeout, headers=self.headers, context=self.ssl_context)

    def client(self) -> Client:
        """A client of this node alone, one attempt per call: the harness waits and retries itself."""
        if self._client is None:
            self._client = Client(
                self.url,
                retry_timeout=0,
                follow_master=False,
                request_timeout=2.0,
                verify=self.ssl_context or True,
                headers=self.headers,
            )
        return self._client

    def close_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def node_id(self) -> str:
        return (self.data_dir / "node-id.dat").read_text().split("\n", 1)[1].strip()


class LocalCluster:
    """Nodes on 127.0.0.1 with free ports; or, given `hosts`, node i on hosts[i] with the default ports and the
    command line prefixed by `argv_prefix(i)` (the chaos runs put each node in its own network namespace)."""

    def __init__(
        self,
        workdir: Path,
        settings: dict[str, str] | None = None,
        max_nodes: int = 7,
        hosts: list[str] | None = None,
        argv_prefix: Callable[[int], list[str]] | None = None,
        client_tls: ssl.SSLContext | None = None,
        client_headers: dict[str, str] | None = None,
    ) -> None:
        """`client_tls` and `client_headers`: how this harness reaches nodes with TLS or tokens on."""
        self.workdir = workdir
        self.client_tls = client_tls
        self.client_headers = dict(client_headers or {})
        self.settings = dict(FAST_SETTINGS if settings is None else settings)
        self.nodes: dict[str, LocalNode] = {}
        self.hosts = hosts
        self.argv_prefix = argv_prefix
        if hosts:
            self._ports = [(9200, 9300)] * len(hosts)
        else:
            ports = free_ports(2 * max_nodes)
            self._ports = [(ports[2 * i], ports[2 * i + 1]) for i in range(max_nodes)]
        self.seed_names: list[str] = []

    def add(self, name: str) -> LocalNode:
        index = len(self.nodes)
        http_port, transport_port = self._ports[index]
        node = LocalNode(name, self.workdir / name, http_port, transport_port)
        node.ssl_context, node.headers = self.client_tls, dict(self.client_headers)
        if self.hosts:
            node.host = self.hosts[index]
        if self.argv_prefix is not None:
            node.argv_prefix = self.argv_prefix(index)
        self.nodes[name] = node
        return node

    def seeds(self) -> str:
        return ",".join(self.nodes[name].transport_address for name in self.seed_names or list(self.nodes))

    def start(
        self,
        name: str,
        initial_master_nodes: list[str] | None = None,
        extra: dict[str, str] | None = None,
        python: str | None = None,
    ) -> LocalNode:
        """Starts (or restarts) a node; `python` runs it with another installation (another release), and is
        kept for its later restarts."""
        node = self.nodes.get(name) or self.add(name)
        if python is not None:
            node.python = python
        settings = {**self.settings, "discovery.seed_hosts": self.seeds(), **(extra or {})}
        if initial_master_nodes:
            settings["cluster.initial_master_nodes"] = ",".join(initial_master_nodes)
        argv = [
            *node.argv_prefix,
            node.python,
            "-m",
            "coordinated.cli",
            "node",
            "--name",
            name,
            "--data-dir",
            str(node.data_dir),
            "--http-port",
            str(node.http_port),
            "--transport-port",
            str(node.transport_port),
            "--host",
            node.host,
        ]
        for key, value in settings.items():
            argv += ["-E", f"{key}={value}"]
        node.data_dir.parent.mkdir(parents=True, exist_ok=True)
        node.log_path = self.workdir / f"{name}.log"
        log = node.log_path.open("ab")
        # Own process group: a Ctrl-C in the terminal reaches the demo, which then stops nodes by PID.
        node.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        return node

    def bootstrap(self, count: int, timeout: float = 30.0, python: str | None = None) -> list[LocalNode]:
        """Start `count` new nodes that bootstrap together, and wait until they agree on a master."""
        names = [f"node-{i}" for i in range(len(self.nodes) + 1, len(self.nodes) + count + 1)]
        for name in names:
            self.add(name)
        started = [self.start(name, initial_master_nodes=names, python=python) for name in names]
        for node in started:
            self.wait_http(node)
        self.wait_master(timeout=timeout, nodes=count)
        return started

    def wait_http(self, node: LocalNode, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not node.alive():
                raise RuntimeError(f"{node.name} exited with {node.process.returncode if node.process else '?'}")
            with contextlib.suppress(OSError):
                status, _ = node.get("/healthz", timeout=1)
                if status == 200:
                    return
            time.sleep(0.05)
        raise TimeoutError(f"{node.name} did not open its HTTP port")

    def running(self) -> list[LocalNode]:
        return [node for node in self.nodes.values() if node.alive()]

    def master(self, among: list[LocalNode] | None = None) -> LocalNode | None:
        """The node every running node agrees is master, or None."""
        masters = set()
        for node in among or self.running():
            try:
                health = node.client().cluster_health()
            except CoordinatedError:
                return None
            if not health.get("master_node"):
                return None
            masters.add(health["master_node"])
        if len(masters) != 1:
            return None
        master_id = masters.pop()
        for node in self.nodes.values():
            if node.alive() and node.node_id() == master_id:
                return node
        return None

    def wait_master(
        self, timeout: float = 20.0, nodes: int | None = None, exclude: LocalNode | None = None
    ) -> LocalNode:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            among = [n for n in self.running() if n is not exclude]
            master = self.master(among)
            if master is not None and master is not exclude:
                if nodes is None:
                    return master
                with contextlib.suppress(CoordinatedError):
                    if master.client().cluster_health().get("number_of_nodes") == nodes:
                        return master
            time.sleep(0.05)
        raise TimeoutError(f"no agreed master within {timeout}s")

    def kill(self, node: LocalNode, sig: int = signal.SIGKILL) -> None:
        if node.process is not None and node.process.poll() is None:
            os.kill(node.process.pid, sig)
            if sig in (signal.SIGKILL, signal.SIGTERM):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.process.wait(timeout=10)

    def stop(self, node: LocalNode, timeout: float = 10.0) -> int | None:
        if node.process is None:
            return None
        if node.process.poll() is None:
            os.kill(node.process.pid, signal.SIGCONT)  # a stopped process cannot handle SIGTERM
            node.process.terminate()
            try:
                node.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait(timeout=5)
        return node.process.returncode

    def stop_all(self, graceful: bool = True) -> None:
        for node in self.nodes.values():
            node.close_client()
            if node.process is None or node.process.poll() is not None:
                continue
            try:
                if graceful:
                    self.stop(node, timeout=5)
                else:
                    os.kill(node.process.pid, signal.SIGKILL)
                    node.process.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                with contextlib.suppress(OSError):
                    os.kill(node.process.pid, signal.SIGKILL)

    def voting_config(self, node: LocalNode) -> dict[str, list[str]]:
        state = node.client().cluster_state(local=True)
        coordination = state["metadata"]["cluster_coordination"]
        names = {node_id: info["name"] for node_id, info in state["nodes"].items()}
        return {
            "committed": [names.get(i, i) for i in coordination["last_committed_config"]],
            "accepted": [names.get(i, i) for i in coordination["last_accepted_config"]],
            "exclusions": [e["node_name"] for e in coordination["voting_config_exclusions"]],
        }
