"""Watch fan-out: many watchers on one prefix, one writer. Measures how long each change takes to reach every
watcher (from the moment the write is sent), the CPU the master (etcd: the leader) spends per write, the
write's own latency with and without the watchers, and each idle watcher's memory on the servers, for us,
etcd (Debian's etcd-server, gRPC Watch streams) and a floor, interleaved round after round in one run.

- Ours: each watcher holds one streaming watch (`GET /_cluster/metadata/_watch?stream=true`, NDJSON),
  round-robin over the 3 nodes as applications in the pods would, each through its own pod's sidecar
  (`--via followers`: on the followers only).
- etcd: each watcher holds one gRPC Watch stream, round-robin over the 3 members: on a connection of its own,
  as watchers in their own pods would (`etcd`), and, as one process would multiplex them, 50 to a connection
  (`etcd (50 per connection)`; `--etcd-per-connection`).
- The floor (`bench/suites/fanout_floor.py`): three bare HTTP servers on uvloop, each holding a third of the watchers'
  chunked responses; a write is a PUT to all three at once, each writing one pre-encoded line to its watchers.
  It is what any HTTP fan-out costs in Python with no replication at all.

The writer (bench/suites/fanout_writer.py) is a process of its own, so that a write's latency is not that of a
process busy reading events. It writes one key at a time, and the next write waits until every watcher has
the key, so each figure is one fan-out. The watchers run in `--harnesses` processes
(bench/suites/fanout_watchers.py, 2 by default), all on the same 2 cores as the servers; ours and the floor's are
read by the same client code (aiohttp, one `msgspec` decode per line), etcd's by grpc.aio. Times are
`time.perf_counter()`, CLOCK_MONOTONIC on Linux, comparable across the processes.

    flock /tmp/bench.lock .venv/bin/python -m bench watch-fanout --watchers 1000 --watchers 10000 --writes 30 --rounds 3
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.harness.etcd import import_stubs
from bench.harness.etcd import stubs_dir as etcd_stubs_dir
from bench.harness.local import cluster, percentile, rss_mb
from bench.harness.machine import conditions, process_cpu_s
from bench.harness.procs import spawn, stop
from coordinated.tools.localcluster import free_ports

# Per phase ("no watchers", "watchers"): its figures by name.
Phases = dict[str, dict[str, float]]
PREFIX = "fan/"
OPEN_AT_ONCE = 200  # watchers connecting at the same time (the servers' accept queues stay short)
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
    """The watchers, in `--harnesses` processes of bench/fanout_watchers.py: when each saw each key."""

    def __init__(self, watchers: int, harnesses: int, argv: Callable[[int], list[str]]) -> None:
        counts = [watchers // harnesses + (1 if index < watchers % harnesses else 0) for index in range(harnesses)]
        script = Path(__file__).with_name("fanout_watchers.py")
        self.argvs = [[sys.executable, str(script), "--watchers", str(n), *argv(n)] for n in counts if n]
        self.processes: list[asyncio.subprocess.Process] = []
        self.readers: list[asyncio.Task[None]] = []
        self.live = 0
        self.all_live = asyncio.Event()
        self.failed = asyncio.Event()
        self.seen: dict[str, list[float]] = {}
        self.reports: dict[str, int] = {}
        self.complete: dict[str, asyncio.Event] = {}

    async def __aenter__(self) -> Deliveries:
        for argv in self.argvs:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                start_new_session=True,
                limit=1 << 24,
            )
            self.processes.append(process)
            self.readers.append(asyncio.create_task(self._read(process)))
        return self

    async def __aexit__(self, *_: object) -> None:
        for process in self.processes:
            if process.stdin is not None:
                process.stdin.close()
        for process in self.processes:
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()
        for reader in self.readers:
            reader.cancel()

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        async for raw in process.stdout:
            kind, _, rest = raw.decode().strip().partition(" ")
            if kind == "live":
                self.live += 1
                if self.live == len(self.processes):
                    self.all_live.set()
            elif kind == "seen":
                key, *times = rest.split()
                self.seen.setdefault(key, []).extend(float(t) for t in times)
                self.reports[key] = self.reports.get(key, 0) + 1
                if self.reports[key] == len(self.processes) and key in self.complete:
                    self.complete[key].set()
        self.failed.set()  # a harness ended: its watchers failed or were cut off

    def expect(self, key: str) -> asyncio.Event:
        self.complete[key] = asyncio.Event()
        if self.reports.get(key) == len(self.processes):
            self.complete[key].set()
        return self.complete[key]

    async def wait(self, event: asyncio.Event, timeout: float) -> None:
        failed = asyncio.create_task(self.failed.wait())
        done = asyncio.create_task(event.wait())
        finished, _ = await asyncio.wait([failed, done], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        failed.cancel()
        done.cancel()
        if done not in finished:
            raise RuntimeError("a harness of watchers failed, or the fan-out did not complete in time")


def repeated(option: str, values: list[str]) -> list[str]:
    """`--option value` once per value, as the watchers and the writer take them."""
    return [word for value in values for word in (option, value)]


class Writer:
    """bench/fanout_writer.py in its own process: `write(key)` returns when it was sent and acknowledged."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = [sys.executable, str(Path(__file__).with_name("fanout_writer.py")), *argv]
        self.process: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Writer:
        self.process = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, start_new_session=True
        )
        return self

    async def __aexit__(self, *_: object) -> None:
        process = self.process
        if process is not None and process.returncode is None:
            process.kill()
            await process.wait()

    async def write(self, key: str) -> tuple[float, float]:
        process = self.process
        assert process is not None and process.stdin is not None and process.stdout is not None
        process.stdin.write(f"{key}\n".encode())
        answer = await asyncio.wait_for(process.stdout.readline(), 60)
        if not answer:
            raise RuntimeError(f"the writer {self.argv} stopped (exit {await process.wait()})")
        sent, acked = answer.split()
        return float(sent), float(acked)


async def run_writes(
    label: str,
    write: Callable[[str], Awaitable[tuple[float, float]]],
    deliveries: Deliveries | None,
    writes: int,
    master_pids: list[int],
) -> dict[str, float]:
    """Sequential writes; each waits for its fan-out. Latency percentiles (ms), CPU per write (ms)."""
    latencies: list[float] = []
    commit: list[float] = []
    harness = [os.getpid(), *(deliveries.pids if deliveries is not None else [])]
    cpu_before = [process_cpu_s(pid) for pid in master_pids]
    harness_before, wall_before = sum(process_cpu_s(pid) for pid in harness), time.perf_counter()
    for i in range(writes):
        key = f"{PREFIX}{label}-{i}"
        done = deliveries.expect(key) if deliveries is not None else None
        sent, acked = await write(key)
        commit.append(acked - sent)
        if done is not None and deliveries is not None:
            await deliveries.wait(done, 120)
            latencies.extend(t - sent for t in deliveries.seen.pop(key))
        await asyncio.sleep(0.05)
    cpu = statistics.fmean(process_cpu_s(pid) - before for pid, before in zip(master_pids, cpu_before, strict=True))
    wall = time.perf_counter() - wall_before
    result = {
        "commit_p50_ms": percentile(commit, 50) * 1000,
        "master_cpu_ms_per_write": cpu / writes * 1000,
        "master_cpu_pct": cpu / wall * 100,
        "harness_cpu_ms_per_write": (sum(process_cpu_s(pid) for pid in harness) - harness_before) / writes * 1000,
    }
    if latencies:
        result |= {
            "deliver_p50_ms": percentile(latencies, 50) * 1000,
            "deliver_p99_ms": percentile(latencies, 99) * 1000,
            "deliver_max_ms": max(latencies) * 1000,
        }
    return result


async def measure_phases(
    write: Callable[[str], Awaitable[tuple[float, float]]],
    master_pids: list[int],
    server_pids: list[int],
    watchers: Callable[[], Deliveries],
    count: int,
    writes: int,
) -> Phases:
    """Writes without watchers, then with `count` watchers live, and each idle watcher's memory on the servers."""
    for i in range(20):
        await write(f"warm/{i}")
    results = {"no watchers": await run_writes("idle", write, None, writes, master_pids)}
    rss_before = sum(rss_mb(pid) for pid in server_pids)
    async with watchers() as deliveries:
        await deliveries.wait(deliveries.all_live, 600)
        await asyncio.sleep(2)  # every watcher parked
        memory_kb = (sum(rss_mb(pid) for pid in server_pids) - rss_before) * 1024 / count
        results["watchers"] = await run_writes("fan", write, deliveries, writes, master_pids)
        results["watchers"]["idle_watcher_kb"] = memory_kb
    return results


# -- ours ---------------------------------------------------------------------------------------------------


async def ours(watchers: int, writes: int, via: str, harnesses: int, raw: list[str]) -> Phases:
    with cluster(3) as local:
        master = local.wait_master()
        assert master is not None and master.pid is not None
        nodes = local.running() if via == "all" else [node for node in local.running() if node is not master]
        urls = [f"{node.url}/_cluster/metadata/_watch?stream=true&prefix={PREFIX}" for node in nodes]
        pids = [node.pid for node in local.running() if node.pid is not None]
        async with Writer(repeated("--http", [f"{master.url}/_cluster/metadata"])) as writer:
            return await measure_phases(
                writer.write,
                [master.pid],
                pids,
                lambda: Deliveries(watchers, harnesses, lambda n: [*repeated("--http", urls), *raw]),
                watchers,
                writes,
            )


# -- the floor ----------------------------------------------------------------------------------------------


async def floor(watchers: int, writes: int, workdir: Path, harnesses: int, raw: list[str]) -> Phases:
    ports = free_ports(3)
    script = Path(__file__).with_name("fanout_floor.py")
    processes = [
        spawn([sys.executable, str(script), "--port", str(port)], workdir / f"floor{i}.log")
        for i, port in enumerate(ports)
    ]
    bases = [f"http://127.0.0.1:{port}" for port in ports]
    try:
        async with Writer(repeated("--http", [f"{base}/kv" for base in bases])) as writer:
            deadline = time.monotonic() + 30
            while True:
                try:
                    await writer.write("probe")
                    break
                except RuntimeError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.2)
                    await writer.__aexit__()
                    await writer.__aenter__()
            pids = [int(process.pid) for process in processes]
            return await measure_phases(
                writer.write,
                pids,
                pids,
                lambda: Deliveries(
                    watchers, harnesses, lambda n: [*repeated("--http", [f"{base}/watch" for base in bases]), *raw]
                ),
                watchers,
                writes,
            )
    finally:
        for process in processes:
            stop(process)


# -- etcd ---------------------------------------------------------------------------------------------------


def stubs_dir() -> Path:
    return etcd_stubs_dir(PROTO, "etcd_watch")


def stubs() -> tuple[ModuleType, ModuleType]:
    return import_stubs(PROTO, "etcd_watch")


async def etcd(watchers: int, writes: int, workdir: Path, harnesses: int, per_connection: int) -> Phases:
    import grpc

    pb2, pb2_grpc = stubs()
    ports = free_ports(6)
    peers = [f"http://127.0.0.1:{ports[2 * i + 1]}" for i in range(3)]
    clients = [f"127.0.0.1:{ports[2 * i]}" for i in range(3)]
    initial = ",".join(f"e{i}={peer}" for i, peer in enumerate(peers))
    data = workdir / f"etcd-{time.monotonic_ns()}"
    processes = []
    for i in range(3):
        argv = ["etcd", "--name", f"e{i}", "--data-dir", str(data / f"e{i}")]
        argv += ["--listen-client-urls", f"http://{clients[i]}", "--advertise-client-urls", f"http://{clients[i]}"]
        argv += ["--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i]]
        argv += ["--initial-cluster", initial, "--initial-cluster-state", "new", "--log-level", "warn"]
        argv += ["--logger", "zap"]
        processes.append(spawn(argv, data / f"e{i}.log"))
    try:
        control = [grpc.aio.insecure_channel(address) for address in clients]
        members: dict[int, int] = {}
        leader = None
        deadline = time.monotonic() + 30
        try:
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
        finally:
            for channel in control:
                await channel.close()
        leader_index = members[leader]
        pids = [int(process.pid) for process in processes]

        def harness(count: int) -> list[str]:
            # One connection per watcher, as watchers in their own pods would have, or `per_connection` of them
            # multiplexed on each, as one client process would.
            channels = max(3, count // per_connection)
            return [
                *repeated("--etcd", clients),
                "--channels",
                str(channels),
                "--prefix",
                PREFIX,
                "--stubs",
                str(stubs_dir()),
            ]

        async with Writer(["--etcd", clients[leader_index], "--stubs", str(stubs_dir())]) as writer:
            return await measure_phases(
                writer.write,
                [pids[leader_index]],
                pids,
                lambda: Deliveries(watchers, harnesses, harness),
                watchers,
                writes,
            )
    finally:
        for process in processes:
            stop(process)


# -- the report ---------------------------------------------------------------------------------------------

FIGURES = (
    ("deliver_p50_ms", "delivery p50 ms"),
    ("deliver_p99_ms", "delivery p99 ms"),
    ("master_cpu_ms_per_write", "master CPU ms/write"),
    ("commit_p50_ms", "write p50 ms"),
    ("idle_watcher_kb", "KB per idle watcher"),
    ("harness_cpu_ms_per_write", "harness CPU ms/write"),
)


def median_range(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def report(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| system | watchers | " + " | ".join(name for _, name in FIGURES) + " | write p50 ms, no watchers |"]
    lines.append("|---|---|" + "---|" * (len(FIGURES) + 1))
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in rows:
        if "failed" not in row:
            groups.setdefault((row["system"], row["watchers"]), []).append(row)
    for (system, watchers), measured in groups.items():
        cells = [median_range([row["watchers_phase"][key] for row in measured]) for key, _ in FIGURES]
        idle = median_range([row["idle_phase"]["commit_p50_ms"] for row in measured])
        lines.append(f"| {system} | {watchers} | {' | '.join(cells)} | {idle} |")
    lines.append("")
    etcds = sorted({system for system, _ in groups if system.startswith("etcd")})
    for watchers, etcd_name in ((w, e) for w in sorted({w for _, w in groups}) for e in etcds):
        ours_rows, etcd_rows = groups.get(("coordinated", watchers)), groups.get((etcd_name, watchers))
        floor_rows = groups.get(("floor", watchers))
        if not ours_rows or not etcd_rows:
            continue
        parts = []
        for key, name, goal in (
            ("deliver_p50_ms", "delivery p50", 1.5),
            ("deliver_p99_ms", "delivery p99", 2.0),
            ("master_cpu_ms_per_write", "master CPU per write", 2.0),
            ("commit_p50_ms", "write p50 with watchers", 1.5),
        ):
            ours_value = statistics.median(row["watchers_phase"][key] for row in ours_rows)
            etcd_value = statistics.median(row["watchers_phase"][key] for row in etcd_rows)
            ratio = ours_value / etcd_value
            part = f"{name} {ratio:.2f}x (goal <= {goal}x: {'met' if ratio <= goal else 'NOT met'})"
            if floor_rows:
                floor_value = statistics.median(row["watchers_phase"][key] for row in floor_rows)
                part += f", the floor's {floor_value / etcd_value:.2f}x"
            parts.append(part)
        lines.append(f"{watchers} watchers, against {etcd_name}: " + "; ".join(parts))
    return lines


@dataclass
class FanoutOptions:
    watchers: list[int] = field(default_factory=lambda: [1000])
    writes: int = 30
    rounds: int = 1  # each round runs every system once, interleaved
    etcd: bool = True
    floor: bool = True
    harnesses: int = 2  # processes that read the watchers' events
    raw_client: bool = False  # read ours and the floor's off the sockets, without aiohttp
    # etcd watchers per gRPC connection: 1 as pods would, 50 as one process would multiplex them
    etcd_per_connection: list[int] = field(default_factory=lambda: [1, 50])
    via: str = "all"  # our watchers on every node, or on followers only


def run(args: FanoutOptions) -> dict[str, Any]:
    """Runs the suite, prints its table and returns its results section (one row per system, size and round)."""
    raw = ["--raw"] if args.raw_client else []

    def etcd_system(watchers: int, workdir: Path, per: int) -> Coroutine[Any, Any, Phases]:
        return etcd(watchers, args.writes, workdir, args.harnesses, per)

    systems: list[tuple[str, Callable[[int, Path], Coroutine[Any, Any, Phases]]]] = [
        ("coordinated", lambda watchers, workdir: ours(watchers, args.writes, args.via, args.harnesses, raw))
    ]
    if args.etcd and shutil.which("etcd") is not None:
        for per in args.etcd_per_connection:
            name = "etcd" if per == 1 else f"etcd ({per} per connection)"
            systems.append((name, partial(etcd_system, per=per)))
    elif args.etcd:
        raise SystemExit("etcd is not installed: `make bench` installs it (scripts/system-deps.sh bench)")
    if args.floor:
        systems.append(("floor", lambda watchers, workdir: floor(watchers, args.writes, workdir, args.harnesses, raw)))
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="coordinated-fanout-") as workdir:
        for round_index in range(args.rounds):
            for watchers in args.watchers:
                for name, run_one in systems:
                    before = conditions(Path(workdir))
                    row: dict[str, Any] = {
                        "round": round_index,
                        "system": name,
                        "watchers": watchers,
                        "conditions": before,
                    }
                    try:
                        phases = asyncio.run(run_one(watchers, Path(workdir)))
                        row |= {"idle_phase": phases["no watchers"], "watchers_phase": phases["watchers"]}
                    except (TimeoutError, AssertionError, OSError, RuntimeError) as error:
                        row["failed"] = f"{type(error).__name__}: {error}"
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    loads = [row["conditions"]["load1"] for row in rows]
    print(f"load1 over the phases {min(loads):.1f}-{max(loads):.1f}; writes per phase {args.writes}")
    print("\n".join(report(rows)))
    return {"options": {"watchers": args.watchers, "writes": args.writes, "rounds": args.rounds}, "rows": rows}
