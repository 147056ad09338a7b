"""The floor (bench/floor_node.py) behind the harness's `System` interface: a physical anchor for our write
path, measured with the same client in the same run as ours and etcd. Selected by label only, e.g.
`--systems 'coordinated 3n,floor 3n,floor 3n apply-round,etcd 3n'`."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import aiohttp
from peers_procs import kill9, spawn, stop
from peers_systems import System, http_put

from coordinated.tools.localcluster import free_ports

NODE_SCRIPT = Path(__file__).with_name("floor_node.py")


class FloorSystem(System):
    def __init__(self, size: int, apply_round: bool = False) -> None:
        self.size = size
        self.tuned = False
        self.apply_round = apply_round
        self.label = f"floor {size}n" + (" apply-round" if apply_round else "")
        self.processes: list[Any] = []
        self.argvs: list[list[str]] = []
        self.ports: list[int] = []
        self.session: aiohttp.ClientSession | None = None
        self.workdir = Path()

    def detection_settings(self) -> str:
        return "none: node 0 leads for ever (a floor for the write path, not a coordination system)"

    async def start(self, workdir: Path) -> None:
        self.workdir = workdir
        self.ports = free_ports(self.size)
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        ports = ",".join(map(str, self.ports))
        for i in range(self.size):
            argv = [sys.executable, str(NODE_SCRIPT), "--index", str(i), "--ports", ports]
            argv += ["--data-dir", str(workdir / f"f{i}")] + (["--apply-round"] if self.apply_round else [])
            self.argvs.append(argv)
            self.processes.append(spawn(argv, workdir / f"f{i}.log"))

    async def stop(self) -> None:
        if self.session is not None:
            await self.session.close()
        for process in self.processes:
            await asyncio.to_thread(stop, process)

    def pid(self, node: int) -> int:
        return int(self.processes[node].pid)

    async def put(self, node: int, key: str, value: int, timeout: float) -> bool:
        assert self.session is not None
        return await http_put(self.session, f"http://127.0.0.1:{self.ports[node]}/kv/{key}", value, timeout)

    async def leader_of(self, node: int) -> int | None:
        assert self.session is not None
        url = f"http://127.0.0.1:{self.ports[node]}/status"
        async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=1.0)) as response:
            leader: int | None = (await response.json())["leader"]
        return leader

    async def restart(self, node: int) -> None:
        """Not for fault trials (no elections): only so the interface is complete."""
        if self.processes[node].poll() is None:
            kill9(self.processes[node])
        self.processes[node] = spawn(self.argvs[node], self.workdir / f"f{node}.log")
