"""Watch fan-out: many watchers on one prefix, one writer. Measures how long each change takes to reach every
watcher (from the moment the write is sent) and the CPU the master (etcd: the leader) spends, with and
without the watchers, for us and, in the same run, for etcd (Debian's etcd-server, gRPC Watch streams).

Our watchers long-poll `GET /_cluster/metadata/_watch` round-robin over the 3 nodes (as applications that
each watch through their own pod's sidecar), or with `--via followers` over the followers only; etcd's watchers each hold a Watch stream, round-robin over the
3 members. The writer writes one key at a time and waits until every watcher has it before the next write,
so each figure is one fan-out. The watchers and the writer run in this process, on the same 2 cores.

    flock /tmp/bench.lock .venv/bin/python bench/watch_fanout.py [--watchers 1000] [--writes 30]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import aiohttp
from peers_env import conditions, process_cpu_s
from peers_procs import spawn, stop
from sidecar_common import cluster, percentile

from coordinated.tools.localcluster import free_ports

PREFIX = "fan/"
# Only the messages used; field numbers as in etcd's rpc.proto and kv.proto.
PROTO = """syntax = "proto3";
package etcdserverpb;
message ResponseHeader { uint64 cluster_id = 1; uint64 member_id = 2; int64 revision = 3; uint64 raft_term = 4; }
message KeyValue { bytes key = 1; int64 create_revision = 2; int64 mod_revision = 3; int64 version = 4; bytes value = 5; }
message Event { int32 type = 1; KeyValue kv = 2; }
message PutRequest { bytes key = 1; bytes value = 2; }
message PutResponse { ResponseHeader header = 1; }
message StatusRequest {}
message StatusResponse { ResponseHeader header = 1; string version = 2; int64 dbSize = 3; uint64 leader = 4; }
message WatchCreateRequest { bytes key = 1; bytes range_end = 2; int64 start_revision = 3; }
message WatchRequest { oneof request_union { WatchCreateRequest create_request = 1; } }
message WatchResponse { ResponseHeader header = 1; int64 watch_id = 2; bool created = 3; bool canceled = 4;
                        repeated Event events = 11; }
service KV { rpc Put(PutRequest) returns (PutResponse) {} }
service Watch { rpc Watch(stream WatchRequest) returns (stream WatchResponse) {} }
service Maintenance { rpc Status(StatusRequest) returns (StatusResponse) {} }
"""


class Deliveries:
    """When each watcher saw each key; a write completes when all watchers have its key."""

    def __init__(self, watchers: int) -> None:
        self.watchers = watchers
        self.seen: dict[str, list[float]] = {}
        self.complete: dict[str, asyncio.Event] = {}

    def expect(self, key: str) -> asyncio.Event:
        self.seen[key] = []
        self.complete[key] = asyncio.Event()
        return self.complete[key]

    def saw(self, key: str) -> None:
        times = self.seen.get(key)
        if times is None:
            return
        times.append(time.perf_counter())
        if len(times) == self.watchers:
            self.complete[key].set()


async def run_writes(
    label: str,
    write: Callable[[str], Awaitable[None]],
    deliveries: Deliveries | None,
    writes: int,
    master_pid: Callable[[], int],
) -> dict[str, float]:
    """Sequential writes; each waits for its fan-out. Returns latency percentiles (ms) and master CPU."""
    latencies: list[float] = []
    commit: list[float] = []
    pid = master_pid()
    cpu_before, wall_before = process_cpu_s(pid), time.perf_counter()
    for i in range(writes):
        key = f"{PREFIX}{label}-{i}"
        done = deliveries.expect(key) if deliveries is not None else None
        sent = time.perf_counter()
        await write(key)
        commit.append(time.perf_counter() - sent)
        if done is not None and deliveries is not None:
            await asyncio.wait_for(done.wait(), 60)
            latencies.extend(t - sent for t in deliveries.seen[key])
        await asyncio.sleep(0.05)
    cpu = process_cpu_s(pid) - cpu_before
    wall = time.perf_counter() - wall_before
    result = {
        "commit_p50_ms": percentile(commit, 50) * 1000,
        "master_cpu_ms_per_write": cpu / writes * 1000,
        "master_cpu_pct": cpu / wall * 100,
    }
    if latencies:
        result |= {
            "deliver_p50_ms": percentile(latencies, 50) * 1000,
            "deliver_p99_ms": percentile(latencies, 99) * 1000,
            "deliver_max_ms": max(latencies) * 1000,
        }
    return result


# -- ours ---------------------------------------------------------------------------------------------------


async def ours(watchers: int, writes: int, via: str) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    with cluster(3) as local:
        master = local.wait_master()
        nodes = local.running() if via == "all" else [node for node in local.running() if node is not master]
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as http:

            async def write(key: str) -> None:
                async with http.put(f"{master.url}/_cluster/metadata/{key}", json=1) as response:
                    await response.read()
                    assert response.status == 200, response.status

            def master_pid() -> int:
                assert master.pid is not None
                return master.pid

            for i in range(20):
                await write(f"warm/{i}")
            results["no watchers"] = await run_writes("idle", write, None, writes, master_pid)

            deliveries = Deliveries(watchers)
            ready = 0
            all_ready = asyncio.Event()

            async def watcher(index: int) -> None:
                nonlocal ready
                node = nodes[index % len(nodes)]
                async with http.get(f"{node.url}/_cluster/metadata/_watch?prefix={PREFIX}&timeout=0s") as response:
                    after = (await response.json())["version"]
                ready += 1
                if ready == watchers:
                    all_ready.set()
                while True:
                    url = f"{node.url}/_cluster/metadata/_watch?prefix={PREFIX}&after_version={after}&timeout=60s"
                    async with http.get(url) as response:
                        body = await response.json()
                    for event in body["events"]:
                        deliveries.saw(event["key"])
                    after = body["version"]

            tasks = [asyncio.create_task(watcher(i)) for i in range(watchers)]
            await asyncio.wait_for(all_ready.wait(), 120)
            await asyncio.sleep(2)  # every watcher parked
            label = f"{watchers} watchers" + ("" if via == "all" else " on followers")
            results[label] = await run_writes("fan", write, deliveries, writes, master_pid)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return results


# -- etcd ---------------------------------------------------------------------------------------------------


def stubs() -> tuple[ModuleType, ModuleType]:
    digest = hashlib.sha256(PROTO.encode()).hexdigest()[:12]
    cache = Path.home() / ".cache" / "coordinated-bench" / f"etcd-watch-stubs-{digest}"
    if not (cache / "etcd_watch_pb2_grpc.py").exists():
        cache.mkdir(parents=True, exist_ok=True)
        (cache / "etcd_watch.proto").write_text(PROTO)
        argv = [sys.executable, "-m", "grpc_tools.protoc", f"-I{cache}", f"--python_out={cache}"]
        argv += [f"--grpc_python_out={cache}", str(cache / "etcd_watch.proto")]
        subprocess.run(argv, check=True)
    sys.path.insert(0, str(cache))
    return importlib.import_module("etcd_watch_pb2"), importlib.import_module("etcd_watch_pb2_grpc")


async def etcd(watchers: int, writes: int, workdir: Path) -> dict[str, dict[str, float]]:
    import grpc

    pb2, pb2_grpc = stubs()
    ports = free_ports(6)
    peers = [f"http://127.0.0.1:{ports[2 * i + 1]}" for i in range(3)]
    clients = [f"127.0.0.1:{ports[2 * i]}" for i in range(3)]
    initial = ",".join(f"e{i}={peer}" for i, peer in enumerate(peers))
    processes = []
    for i in range(3):
        argv = ["etcd", "--name", f"e{i}", "--data-dir", str(workdir / f"e{i}")]
        argv += ["--listen-client-urls", f"http://{clients[i]}", "--advertise-client-urls", f"http://{clients[i]}"]
        argv += ["--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i]]
        argv += ["--initial-cluster", initial, "--initial-cluster-state", "new", "--log-level", "warn"]
        argv += ["--logger", "zap"]
        processes.append(spawn(argv, workdir / f"e{i}.log"))
    results: dict[str, dict[str, float]] = {}
    channels: list[Any] = []
    try:
        control = [grpc.aio.insecure_channel(address) for address in clients]
        channels.extend(control)
        members: dict[int, int] = {}
        leader = None
        deadline = time.monotonic() + 30
        while leader is None:
            try:
                for i, channel in enumerate(control):
                    status = await pb2_grpc.MaintenanceStub(channel).Status(pb2.StatusRequest(), timeout=1)
                    members[status.header.member_id] = i
                    leader = status.leader or None
            except grpc.aio.AioRpcError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        leader_index = members[leader]
        kv = pb2_grpc.KVStub(control[leader_index])

        async def write(key: str) -> None:
            await kv.Put(pb2.PutRequest(key=key.encode(), value=b"1"), timeout=10)

        def master_pid() -> int:
            return int(processes[leader_index].pid)

        for i in range(20):
            await write(f"warm/{i}")
        results["no watchers"] = await run_writes("idle", write, None, writes, master_pid)

        deliveries = Deliveries(watchers)
        # Many channels (HTTP/2 connections), so that stream limits per connection play no part.
        streams = [grpc.aio.insecure_channel(clients[i % 3]) for i in range(max(3, watchers // 50))]
        channels.extend(streams)
        created = 0
        all_created = asyncio.Event()
        range_end = PREFIX[:-1] + chr(ord(PREFIX[-1]) + 1)

        async def watcher(index: int) -> None:
            nonlocal created
            call = pb2_grpc.WatchStub(streams[index % len(streams)]).Watch()
            create = pb2.WatchCreateRequest(key=PREFIX.encode(), range_end=range_end.encode())
            await call.write(pb2.WatchRequest(create_request=create))
            async for response in call:
                if response.created:
                    created += 1
                    if created == watchers:
                        all_created.set()
                for event in response.events:
                    deliveries.saw(event.kv.key.decode())

        tasks = [asyncio.create_task(watcher(i)) for i in range(watchers)]
        await asyncio.wait_for(all_created.wait(), 120)
        await asyncio.sleep(2)
        results[f"{watchers} watchers"] = await run_writes("fan", write, deliveries, writes, master_pid)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        for channel in channels:
            await channel.close()
        for process in processes:
            stop(process)
    return results


def show(system: str, results: dict[str, dict[str, float]]) -> None:
    for phase, r in results.items():
        delivery = (
            f"delivery p50 {r['deliver_p50_ms']:.1f} ms, p99 {r['deliver_p99_ms']:.1f} ms, max {r['deliver_max_ms']:.1f} ms; "
            if "deliver_p50_ms" in r
            else ""
        )
        print(
            f"{system:10s} {phase:14s} {delivery}write commit p50 {r['commit_p50_ms']:.2f} ms; "
            f"master CPU {r['master_cpu_ms_per_write']:.1f} ms/write ({r['master_cpu_pct']:.0f}% of a core)"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--watchers", type=int, default=1000)
    parser.add_argument("--writes", type=int, default=30)
    parser.add_argument("--no-etcd", action="store_true")
    parser.add_argument(
        "--via", choices=("all", "followers"), default="all", help="our watchers on every node, or on followers only"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="coordinated-fanout-") as workdir:
        print(f"conditions: {conditions(Path(workdir))}; load {os.getloadavg()}")
        show("coordinated", asyncio.run(ours(args.watchers, args.writes, args.via)))
        if args.no_etcd or shutil.which("etcd") is None:
            print("etcd: not run" + ("" if args.no_etcd else " (etcd-server is not installed)"))
        else:
            show("etcd", asyncio.run(etcd(args.watchers, args.writes, Path(workdir))))


if __name__ == "__main__":
    main()
