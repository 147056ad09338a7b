"""PySyncObj nodes (bench/peers_pso_node.py) on 127.0.0.1, driven over HTTP with one aiohttp session."""

from __future__ import annotations

import asyncio
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import aiohttp
from peers_procs import kill9, spawn, stop
from peers_systems import System, http_put

from coordinated.tools.localcluster import free_ports

NODE_SCRIPT = Path(__file__).with_name("peers_pso_node.py")


def pso_version() -> str:
    try:
        return metadata.version("pysyncobj")
    except metadata.PackageNotFoundError:
        return "not installed"


class PySyncObjSystem(System):
    def __init__(self, size: int, batch: bool = True, tuned: bool = False) -> None:
        self.size = size
        self.batch = batch
        self.tuned = tuned
        self.label = f"PySyncObj {size}n" + ("" if batch else " no-batch") + (" tuned" if tuned else "")
        self.processes: list[Any] = []
        self.argvs: list[list[str]] = []
        self.http_ports: list[int] = []
        self.raft_index: dict[str, int] = {}
        self.session: aiohttp.ClientSession | None = None
        self.workdir = Path()

    def detection_settings(self) -> str:
        if self.tuned:
            return "tuned: raftMinTimeout 0.2s, raftMaxTimeout 0.5s, appendEntriesPeriod 50ms, connectionTimeout 1s"
        return "defaults: raftMinTimeout 0.4s, raftMaxTimeout 1.4s, appendEntriesPeriod 100ms, connectionTimeout 3.5s"

    async def start(self, workdir: Path) -> None:
        self.workdir = workdir
        ports = free_ports(2 * self.size)
        rafts = [f"127.0.0.1:{ports[2 * i + 1]}" for i in range(self.size)]
        self.raft_index = {raft: i for i, raft in enumerate(rafts)}
        self.http_ports = [ports[2 * i] for i in range(self.size)]
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        for i in range(self.size):
            partners = ",".join(raft for raft in rafts if raft != rafts[i])
            argv = [sys.executable, str(NODE_SCRIPT), "--raft", rafts[i], "--partners", partners]
            argv += ["--http-port", str(self.http_ports[i]), "--data-dir", str(workdir / f"p{i}")]
            argv += [] if self.batch else ["--no-batch"]
            argv += ["--tuned"] if self.tuned else []
            self.argvs.append(argv)
            self.processes.append(spawn(argv, workdir / f"p{i}.log"))
        for i in range(self.size):
            await self._wait_http(i)

    async def _wait_http(self, node: int, timeout: float = 30.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            try:
                await self.leader_of(node)
                return
            except (aiohttp.ClientError, OSError, TimeoutError):
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.05)

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

    async def leader_of(self, node: int) -> int | None:
        assert self.session is not None
        url = f"http://127.0.0.1:{self.http_ports[node]}/status"
        async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=1.0)) as response:
            leader = (await response.json())["leader"]
        return self.raft_index.get(leader or "")

    async def restart(self, node: int) -> None:
        if self.processes[node].poll() is None:
            kill9(self.processes[node])
        self.processes[node] = spawn(self.argvs[node], self.workdir / f"p{node}.log")
        await self._wait_http(node)
