"""The floor (bench/harness/floor_node.py) behind the harness's `System` interface: a physical anchor for our write
path, measured with the same client in the same run as ours and etcd. Selected by label only, e.g.
`--systems 'coordinated 3n,floor 3n,floor 3n apply-round,etcd 3n'`."""

from __future__ import annotations

import sys
from pathlib import Path

from bench.harness.systems import HttpNodesSystem
from coordinated.tools.localcluster import free_ports

NODE_SCRIPT = Path(__file__).with_name("floor_node.py")


class FloorSystem(HttpNodesSystem):
    log_prefix = "f"

    def __init__(self, size: int, apply_round: bool = False, raw_peers: bool = False) -> None:
        super().__init__()
        self.size = size
        self.tuned = False
        self.apply_round = apply_round
        self.raw_peers = raw_peers
        self.label = f"floor {size}n" + (" apply-round" if apply_round else "") + (" raw-tcp" if raw_peers else "")

    def detection_settings(self) -> str:
        return "none: node 0 leads for ever (a floor for the write path, not a coordination system)"

    async def start(self, workdir: Path) -> None:
        *self.http_ports, peer_port = free_ports(self.size + 1)
        ports = ",".join(map(str, self.http_ports))
        options = (["--apply-round"] if self.apply_round else []) + (
            ["--raw-peers", str(peer_port)] if self.raw_peers else []
        )
        argvs = [
            [
                sys.executable,
                str(NODE_SCRIPT),
                "--index",
                str(i),
                "--ports",
                ports,
                "--data-dir",
                str(workdir / f"f{i}"),
                *options,
            ]
            for i in range(self.size)
        ]
        await self.launch(workdir, argvs)

    async def leader_of(self, node: int) -> int | None:
        leader: int | None = (await self.status(node))["leader"]
        return leader
