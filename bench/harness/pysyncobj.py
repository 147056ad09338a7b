"""PySyncObj nodes (bench/harness/pysyncobj_node.py) on 127.0.0.1, driven over HTTP with one aiohttp session."""

from __future__ import annotations

import sys
from pathlib import Path

from bench.harness.systems import HttpNodesSystem
from coordinated.tools.localcluster import free_ports

NODE_SCRIPT = Path(__file__).with_name("pysyncobj_node.py")


class PySyncObjSystem(HttpNodesSystem):
    log_prefix = "p"

    def __init__(self, size: int, batch: bool = True, tuned: bool = False) -> None:
        super().__init__()
        self.size = size
        self.batch = batch
        self.tuned = tuned
        self.label = f"PySyncObj {size}n" + ("" if batch else " no-batch") + (" tuned" if tuned else "")
        self.raft_index: dict[str, int] = {}

    def detection_settings(self) -> str:
        if self.tuned:
            return "tuned: raftMinTimeout 0.2s, raftMaxTimeout 0.5s, appendEntriesPeriod 50ms, connectionTimeout 1s"
        return "defaults: raftMinTimeout 0.4s, raftMaxTimeout 1.4s, appendEntriesPeriod 100ms, connectionTimeout 3.5s"

    async def start(self, workdir: Path) -> None:
        ports = free_ports(2 * self.size)
        rafts = [f"127.0.0.1:{ports[2 * i + 1]}" for i in range(self.size)]
        self.raft_index = {raft: i for i, raft in enumerate(rafts)}
        self.http_ports = [ports[2 * i] for i in range(self.size)]
        argvs = []
        for i in range(self.size):
            partners = ",".join(raft for raft in rafts if raft != rafts[i])
            argv = [sys.executable, str(NODE_SCRIPT), "--raft", rafts[i], "--partners", partners]
            argv += ["--http-port", str(self.http_ports[i]), "--data-dir", str(workdir / f"p{i}")]
            argv += [] if self.batch else ["--no-batch"]
            argv += ["--tuned"] if self.tuned else []
            argvs.append(argv)
        await self.launch(workdir, argvs)

    async def leader_of(self, node: int) -> int | None:
        return self.raft_index.get((await self.status(node))["leader"] or "")
