"""etcd (Debian's etcd-server) members on 127.0.0.1, driven with gRPC (`grpc.aio`).

The stubs come from a minimal .proto (only the messages the benchmark needs; protobuf ignores the fields
left out) compiled at run time with grpcio-tools into a cache directory, never into the repository.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from bench.harness.procs import kill9, spawn, stop
from bench.harness.systems import System
from bench.harness.tls import BenchTls
from coordinated.tools.localcluster import free_ports

PROTO = """syntax = "proto3";
package etcdserverpb;
message ResponseHeader { uint64 cluster_id = 1; uint64 member_id = 2; int64 revision = 3; uint64 raft_term = 4; }
message PutRequest { bytes key = 1; bytes value = 2; }
message PutResponse { ResponseHeader header = 1; }
message StatusRequest {}
message StatusResponse { ResponseHeader header = 1; string version = 2; int64 dbSize = 3; uint64 leader = 4; }
service KV { rpc Put(PutRequest) returns (PutResponse) {} }
service Maintenance { rpc Status(StatusRequest) returns (StatusResponse) {} }
"""
# Fast reconnects after a member restarts; gRPC's default backoff (1s doubling to 120s) would dominate.
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 300),
]
TUNED = {"heartbeat-interval": "50", "election-timeout": "500"}


def stubs_dir(proto: str, name: str) -> Path:
    """The folder of the Python stubs of `proto` (modules `{name}_pb2` and `{name}_pb2_grpc`), compiled with
    grpcio-tools on first use into a cache named after the .proto's digest."""
    digest = hashlib.sha256(proto.encode()).hexdigest()[:12]
    cache = Path.home() / ".cache" / "coordinated-bench" / f"{name}-stubs-{digest}"
    if not (cache / f"{name}_pb2_grpc.py").exists():
        cache.mkdir(parents=True, exist_ok=True)
        (cache / f"{name}.proto").write_text(proto)
        argv = [sys.executable, "-m", "grpc_tools.protoc", f"-I{cache}", f"--python_out={cache}"]
        argv += [f"--grpc_python_out={cache}", str(cache / f"{name}.proto")]
        subprocess.run(argv, check=True)
    return cache


def import_stubs(proto: str, name: str) -> tuple[ModuleType, ModuleType]:
    cache = stubs_dir(proto, name)
    if str(cache) not in sys.path:
        sys.path.insert(0, str(cache))
    return importlib.import_module(f"{name}_pb2"), importlib.import_module(f"{name}_pb2_grpc")


def load_stubs() -> tuple[ModuleType, ModuleType]:
    return import_stubs(PROTO, "etcd_min")


class EtcdSystem(System):
    def __init__(self, size: int, tuned: bool = False, tls: BenchTls | None = None) -> None:
        self.size = size
        self.tuned = tuned
        self.tls = tls
        self.label = f"etcd {size}n" + (" tuned" if tuned else "") + (" TLS" if tls else "")
        self.pb2, self.pb2_grpc = load_stubs()
        self.processes: list[Any] = []
        self.argvs: list[list[str]] = []
        self.channels: list[grpc.aio.Channel] = []
        self.kv: list[Any] = []
        self.maintenance: list[Any] = []
        self.member_ids: dict[int, int] = {}
        self.workdir = Path()

    def detection_settings(self) -> str:
        if self.tuned:
            return "tuned: --heartbeat-interval=50 --election-timeout=500 (ms)"
        return "defaults: heartbeat 100ms, election timeout 1000ms"

    async def start(self, workdir: Path) -> None:
        self.workdir = workdir
        ports = free_ports(2 * self.size)
        scheme = "https" if self.tls is not None else "http"
        peers = [f"{scheme}://127.0.0.1:{ports[2 * i + 1]}" for i in range(self.size)]
        initial = ",".join(f"e{i}={peer}" for i, peer in enumerate(peers))
        for i in range(self.size):
            client = f"{scheme}://127.0.0.1:{ports[2 * i]}"
            argv = ["etcd", "--name", f"e{i}", "--data-dir", str(workdir / f"e{i}")]
            argv += ["--listen-client-urls", client, "--advertise-client-urls", client]
            argv += ["--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i]]
            argv += ["--initial-cluster", initial, "--initial-cluster-state", "new"]
            argv += ["--initial-cluster-token", workdir.name, "--logger", "zap", "--log-level", "warn"]
            if self.tuned:
                argv += [f"--{name}={value}" for name, value in TUNED.items()]
            if self.tls is not None:
                argv += self.tls.etcd_flags()
            self.argvs.append(argv)
            self.processes.append(spawn(argv, workdir / f"e{i}.log"))
            target = client.split("://", 1)[1]
            if self.tls is None:
                channel = grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)
            else:
                credentials = grpc.ssl_channel_credentials(root_certificates=self.tls.ca.certificate.read_bytes())
                channel = grpc.aio.secure_channel(target, credentials, options=CHANNEL_OPTIONS)
            self.channels.append(channel)
            self.kv.append(self.pb2_grpc.KVStub(channel))
            self.maintenance.append(self.pb2_grpc.MaintenanceStub(channel))
        for i in range(self.size):
            self.member_ids[await self._member_id(i)] = i

    async def _member_id(self, node: int, timeout: float = 30.0) -> int:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            try:
                status = await self.maintenance[node].Status(self.pb2.StatusRequest(), timeout=1.0)
                return int(status.header.member_id)
            except grpc.aio.AioRpcError:
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.1)

    async def stop(self) -> None:
        for channel in self.channels:
            await channel.close()
        for process in self.processes:
            await asyncio.to_thread(stop, process)

    def pid(self, node: int) -> int:
        return int(self.processes[node].pid)

    async def put(self, node: int, key: str, value: int, timeout: float) -> bool:
        try:
            await self.kv[node].Put(self.pb2.PutRequest(key=key.encode(), value=b"%d" % value), timeout=timeout)
            return True
        except grpc.aio.AioRpcError:
            return False

    async def leader_of(self, node: int) -> int | None:
        status = await self.maintenance[node].Status(self.pb2.StatusRequest(), timeout=1.0)
        return self.member_ids.get(int(status.leader))

    async def restart(self, node: int) -> None:
        if self.processes[node].poll() is None:
            kill9(self.processes[node])
        self.processes[node] = spawn(self.argvs[node], self.workdir / f"e{node}.log")
        await self._member_id(node)
