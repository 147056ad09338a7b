"""The systems under test behind one interface, so that every figure uses the same client harness.

A `System` starts N local nodes on 127.0.0.1, writes through a chosen node, names the leader the live nodes
agree on, signals and restarts nodes by PID, and stops everything it started.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from bench.harness.local import percentile
from bench.harness.procs import kill9, spawn, stop
from bench.harness.tls import BenchTls
from coordinated.tools.localcluster import FAST_SETTINGS, LocalCluster, LocalNode

__all__ = ["HttpNodesSystem", "OursSystem", "System", "http_put", "percentile"]


async def http_put(session: aiohttp.ClientSession, url: str, value: int, timeout: float) -> bool:
    try:
        async with session.put(url, json=value, timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            await response.read()
            return response.status == 200
    except (TimeoutError, aiohttp.ClientError, OSError):
        return False


class System(ABC):
    """One cluster of one system. `label` names the system and its settings in every table."""

    label: str
    size: int
    tuned: bool

    @abstractmethod
    async def start(self, workdir: Path) -> None: ...

    @abstractmethod
    async def stop(self) -> None: ...

    @abstractmethod
    def pid(self, node: int) -> int: ...

    @abstractmethod
    async def put(self, node: int, key: str, value: int, timeout: float) -> bool:
        """True only if the write was acknowledged as committed within `timeout` seconds."""

    @abstractmethod
    async def leader_of(self, node: int) -> int | None:
        """The index of the node that `node` currently believes is the leader (None if unknown or down)."""

    @abstractmethod
    async def restart(self, node: int) -> None: ...

    @abstractmethod
    def detection_settings(self) -> str:
        """The failure-detection settings in force, as text for the report."""

    def signal(self, node: int, sig: int) -> None:
        os.kill(self.pid(node), sig)

    async def agreed_leader(self, among: list[int]) -> int | None:
        views = await asyncio.gather(*(self.leader_of(i) for i in among), return_exceptions=True)
        leaders = {v for v in views if not isinstance(v, BaseException)}
        if len(leaders) != 1 or any(isinstance(v, BaseException) for v in views):
            return None
        leader = leaders.pop()
        return leader

    async def wait_healthy(self, timeout: float = 90.0) -> int:
        """Wait until all nodes agree on a leader and a write through every node succeeds; returns the leader."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            leader = await self.agreed_leader(list(range(self.size)))
            if leader is not None:
                # a fresh value: rewriting an unchanged one would be acknowledged by us without a publication
                oks = [await self.put(i, f"health-{i}", time.time_ns(), timeout=2.0) for i in range(self.size)]
                if all(oks):
                    return leader
            await asyncio.sleep(0.1)
        raise TimeoutError(f"{self.label}: not healthy within {timeout}s")


class HttpNodesSystem(System):
    """Benchmark node processes of this repo's own (PySyncObj's front, the floor), each with an HTTP front on
    127.0.0.1: `PUT /kv/{key}` writes, `GET /status` answers `{"leader": ...}`. Started, signalled, restarted
    and stopped by PID; a subclass builds each node's command line and reads the leader off `status`."""

    log_prefix = "n"  # each node's log in the workdir: f"{log_prefix}{index}.log"

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen[bytes]] = []
        self.argvs: list[list[str]] = []
        self.http_ports: list[int] = []
        self.session: aiohttp.ClientSession | None = None
        self.workdir = Path()

    async def launch(self, workdir: Path, argvs: list[list[str]]) -> None:
        """Start one node per command line (whose HTTP port is `http_ports[i]`) and wait for every front."""
        self.workdir = workdir
        self.argvs = argvs
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        self.processes = [spawn(argv, self._log(i)) for i, argv in enumerate(argvs)]
        for i in range(len(argvs)):
            await self._wait_http(i)

    def _log(self, node: int) -> Path:
        return self.workdir / f"{self.log_prefix}{node}.log"

    async def _wait_http(self, node: int, timeout: float = 30.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            try:
                await self.status(node)
                return
            except (aiohttp.ClientError, OSError, TimeoutError):
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.05)

    async def status(self, node: int) -> dict[str, Any]:
        assert self.session is not None
        url = f"http://127.0.0.1:{self.http_ports[node]}/status"
        async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=1.0)) as response:
            status: dict[str, Any] = await response.json()
        return status

    async def stop(self) -> None:
        if self.session is not None:
            await self.session.close()
        for process in self.processes:
            await asyncio.to_thread(stop, process)

    def pid(self, node: int) -> int:
        return int(self.processes[node].pid)

    async def put(self, node: int, key: str, value: int, timeout: float) -> bool:
        assert self.session is not None
        return await http_put(self.session, f"http://127.0.0.1:{self.http_ports[node]}/kv/{key}", value, timeout)

    async def restart(self, node: int) -> None:
        if self.processes[node].poll() is None:
            kill9(self.processes[node])
        self.processes[node] = spawn(self.argvs[node], self._log(node))
        await self._wait_http(node)


def source_trees(specs: list[str]) -> list[tuple[str, Path]]:
    """`--source NAME=DIR` options as (name, directory)."""
    return [(spec.split("=", 1)[0], Path(spec.split("=", 1)[1])) for spec in specs]


# What a node imports: the client's folder holds `coordinated.key_names`, which the core checks every key with.
NODE_PARTS = ("core", "s3", "sidecar", "tools", "client")


def tree_pythonpath(tree: Path, parts: tuple[str, ...] = NODE_PARTS) -> str:
    """The PYTHONPATH that runs the sidecar and its tools (or other deployables' `parts`) from source tree `tree`
    (an A/B of code)."""
    return os.pathsep.join(str(tree / part) for part in parts)


class OursSystem(System):
    """coordinated-cluster sidecars, driven over their HTTP API with one aiohttp session."""

    def __init__(
        self,
        size: int,
        tuned: bool = False,
        tls: BenchTls | None = None,
        extra: dict[str, str] | None = None,
        source: tuple[str, Path] | None = None,
        wrap: Callable[[int], list[str]] | None = None,
    ) -> None:
        self.size = size
        self.wrap = wrap  # node index -> a command line that runs the node's (a profiler: bench/cpu_sampler.py)
        self.tuned = tuned
        self.tls = tls
        self.extra = extra or {}
        self.source = source  # (name, directory): run the sidecar of another source tree (an A/B of code)
        self.label = f"coordinated {size}n" + (" tuned" if tuned else "") + (" TLS" if tls else "")
        self.label += "".join(f" [{name}={value}]" for name, value in self.extra.items())
        self.label += f" [{source[0]}]" if source else ""
        self.cluster: LocalCluster | None = None
        self.names: list[str] = []
        self.ids: dict[str, int] = {}
        self.session: aiohttp.ClientSession | None = None

    def detection_settings(self) -> str:
        if not self.tuned:
            return "defaults: leader_check/follower_check interval 1s, timeout 10s, retry_count 3"
        return "tuned: leader_check/follower_check interval 200ms, timeout 500ms, retry_count 2 (FAST_SETTINGS)"

    def argv_prefix(self) -> Callable[[int], list[str]] | None:
        """What each node's command line starts with: the source tree's PYTHONPATH, then the wrapper."""
        env = ["env", "PYTHONPATH=" + tree_pythonpath(self.source[1])] if self.source is not None else []
        wrap = self.wrap
        if not env and wrap is None:
            return None
        return lambda index: env + (wrap(index) if wrap is not None else [])

    async def start(self, workdir: Path) -> None:
        settings = dict(FAST_SETTINGS) if self.tuned else {}
        settings.update(self.extra)
        context = None
        if self.tls is not None:
            settings.update(self.tls.ours_settings())
            context = self.tls.client_context()
        self.cluster = LocalCluster(
            workdir, settings=settings, max_nodes=self.size, client_tls=context, argv_prefix=self.argv_prefix()
        )
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ssl=context or True))
        nodes = await asyncio.to_thread(self.cluster.bootstrap, self.size, 60)
        self.names = [node.name for node in nodes]
        self.ids = {node.node_id(): index for index, node in enumerate(nodes)}

    async def stop(self) -> None:
        if self.session is not None:
            await self.session.close()
        if self.cluster is not None:
            await asyncio.to_thread(self.cluster.stop_all, False)

    def _node(self, index: int) -> LocalNode:
        assert self.cluster is not None
        return self.cluster.nodes[self.names[index]]

    def pid(self, node: int) -> int:
        pid = self._node(node).pid
        assert pid is not None
        return pid

    async def put(self, node: int, key: str, value: int, timeout: float) -> bool:
        assert self.session is not None
        return await http_put(self.session, f"{self._node(node).url}/_cluster/metadata/{key}", value, timeout)

    async def leader_of(self, node: int) -> int | None:
        assert self.session is not None
        url = f"{self._node(node).url}/_cluster/health"
        async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=1.0)) as response:
            health = await response.json()
        return self.ids.get(health.get("master_node") or "")

    async def restart(self, node: int) -> None:
        assert self.cluster is not None
        local = self._node(node)
        if local.alive():
            self.cluster.kill(local, signal.SIGKILL)
        self.cluster.start(local.name)
        await asyncio.to_thread(self.cluster.wait_http, local, 30.0)
