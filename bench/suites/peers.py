"""The headline: sequential write latency and write throughput at 1, 16 and 64 clients, ours against etcd
(gRPC) at 3 and 5 nodes, with one client harness, interleaved round after round in one run.

    python -m bench peers [--quick] [--rounds 3] [--out results.json]
    python -m bench peers --systems 'coordinated 3n,etcd 3n,PySyncObj 3n,PySyncObj 3n no-batch'
    python -m bench peers --tls --rounds 2                      # the cost of TLS, ours and etcd's
    python -m bench peers --cpu-hog --systems 'coordinated 3n,etcd 3n'
    python -m bench peers --systems 'coordinated 3n,floor 3n,floor 3n apply-round,etcd 3n'  # our stack's floor
    python -m bench peers --ab node.event_loop=asyncio --systems 'coordinated 3n,coordinated 3n [node.event_loop=asyncio],etcd 3n'
    python -m bench peers --ab-tree main --systems 'coordinated 3n,coordinated 3n [main],etcd 3n'
    python -m bench peers --ab-tree 4899c15 --ab-tree main --systems 'coordinated 3n,coordinated 3n [4899c15],coordinated 3n [main],etcd 3n'

Around each system's phase the run measures the machine (fsync latency, load, CPU/IO pressure, other
processes' CPU) and each system's and the harness's CPU per write, and prints them with the results. A run in
which etcd is far from its known figures here is flagged (bench/harness/etcd_check.py); the report prints the
flag above its ratios. With --cpu-hog every system is measured twice, quiet and with a busy loop on one core
("+hog" rows). With --tls, 3 nodes of ours and of etcd run each with TLS off and on, and the change is printed.

Prints figures and never asserts timings; with --out, adds a `peers` section to that results file.
Everything runs on 127.0.0.1, and every process started is stopped by PID, also on failure.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import ROOT
from bench.harness.etcd import EtcdSystem
from bench.harness.etcd_check import ETCD, etcd_check
from bench.harness.floor import FloorSystem
from bench.harness.machine import HOG, CpuHog, CpuMeter, conditions
from bench.harness.measure import idle_rss, sequential, throughput
from bench.harness.pysyncobj import PySyncObjSystem
from bench.harness.rounds import Factory, Results, new_results, rotated, run_system, selected
from bench.harness.systems import NODE_PARTS, OursSystem, System
from bench.harness.tls import BenchTls

PERF: list[Factory] = [
    lambda: OursSystem(3),
    lambda: OursSystem(5),
    lambda: EtcdSystem(3),
    lambda: EtcdSystem(5),
    lambda: PySyncObjSystem(3),
    lambda: PySyncObjSystem(3, batch=False),
]
# Physical anchors, run only when named in --systems: the least work a replicated write costs in our stack.
FLOOR: list[Factory] = [
    lambda: FloorSystem(3),
    lambda: FloorSystem(3, apply_round=True),
    lambda: FloorSystem(5),
    lambda: FloorSystem(5, apply_round=True),
    lambda: FloorSystem(3, apply_round=True, raw_peers=True),
    lambda: FloorSystem(5, apply_round=True, raw_peers=True),
]
HEADLINE = "coordinated 3n,coordinated 5n,etcd 3n,etcd 5n"


def ab_variant(setting: str) -> Factory:
    """3 nodes of ours with one node setting changed (`name=value`), labelled `coordinated 3n [name=value]`: the
    B side of an A/B of one hot-path lever against `coordinated 3n` in the same run."""
    name, sep, value = setting.partition("=")
    if not sep:
        raise SystemExit(f"--ab expects SETTING=VALUE, got {setting!r}")
    return lambda: OursSystem(3, extra={name.strip(): value.strip()})


def export_tree(revision: str, into: Path) -> None:
    """The source a node runs (NODE_PARTS, those `revision` has) in `into`, for `--ab-tree`."""
    into.mkdir(parents=True)
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-tree", "--name-only", revision], check=True, capture_output=True, text=True
    )
    parts = [part for part in NODE_PARTS if part in listed.stdout.split()]
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, *parts], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)


def tree_variant(revision: str, tree: Path) -> Factory:
    """3 nodes of ours running the sidecar of `revision`, exported to `tree`: `coordinated 3n [revision]`."""
    return lambda: OursSystem(3, source=(revision, tree))


def cpu_text(cpu: dict[str, float]) -> str:
    roles = (
        f" (master {cpu['master_ms']:.3f} ms, each follower {cpu['follower_ms']:.3f} ms)"
        if "follower_ms" in cpu
        else ""
    )
    return (
        f"cpu/write {cpu['system_ms']:.2f} ms{roles} + harness {cpu['harness_ms']:.2f} ms, "
        f"others {cpu['others_cores']:.1f} cores"
    )


def conditions_text(cond: dict[str, float]) -> str:
    return (
        f"fsync p50 {cond['fsync_p50']:.2f} ms p99 {cond['fsync_p99']:.2f} ms, load {cond['load1']:.1f}, "
        f"cpu pressure {cond['cpu_pressure']:.0f}%, io pressure {cond['io_pressure']:.0f}%"
    )


async def measure(system: System, leader: int, args: PeersOptions, r: Any, hog: CpuHog | None) -> None:
    """Sequential latency and throughput at 1, 16 and 64 clients, each with the CPU it cost per write."""
    pids = [system.pid(i) for i in range(system.size)]
    hog_pid = hog.pid if hog is not None else None
    await sequential(system, leader, 20)  # warm-up
    with CpuMeter(pids, hog_pid) as meter:
        seq = await sequential(system, leader, args.writes)
    r["seq_p50"].append(seq["p50"])
    r["seq_p99"].append(seq["p99"])
    master_pid = pids[leader]
    cpu = {"seq": meter.per_write(args.writes, master_pid)}
    print(f"{system.label:28s} seq p50 {seq['p50']:7.2f} ms  p99 {seq['p99']:7.2f} ms   {cpu_text(cpu['seq'])}")
    # The clients start at the node after the leader, so that the 1-client point goes through a follower that
    # forwards in every system and round (from node 0 it went to the leader or not, as elections fell).
    first = (leader + 1) % system.size
    for clients in (1, 16, 64):
        with CpuMeter(pids, hog_pid) as meter:
            tput = await throughput(system, clients, args.seconds, first)
        r[f"tput_{clients}"].append(tput["rate"])
        cpu[f"tput_{clients}"] = meter.per_write(int(tput["writes"]), master_pid)
        errors = f" ({tput['errors']} err)" if tput["errors"] else ""
        print(
            f"{system.label:28s} {clients:2d} clients {tput['rate']:7.1f}/s{errors}   {cpu_text(cpu[f'tput_{clients}'])}"
        )
    r["cpu"].append(cpu)


async def perf_round(args: PeersOptions, results: Results, base: Path, round_: int) -> None:
    async def body(system: System, workdir: Path) -> None:
        r = results[system.label]
        r["rss_mb"] += await idle_rss(system, args.idle)
        leader = await system.wait_healthy()
        phases: list[tuple[Any, CpuHog | None]] = [(r, None)]
        if args.cpu_hog:
            phases.append((results[system.label + HOG], CpuHog(workdir)))
        for target, hog in phases:
            before = conditions(workdir)
            if hog is None:
                await measure(system, leader, args, target, None)
            else:
                with hog:
                    await measure(system, leader, args, target, hog)
            after = conditions(workdir)
            target["conditions"].append({"before": before, "after": after})
            if system.label == ETCD and hog is None:
                phase = etcd_check({ETCD: {"seq_p50": target["seq_p50"][-1:], "tput_64": target["tput_64"][-1:]}})
                for reason in phase["reasons"]:
                    print(f"!! this phase: {reason}")
            label = system.label + (HOG if hog else "")
            print(f"{label:28s} before: {conditions_text(before)}\n{label:28s} after:  {conditions_text(after)}")
            print(flush=True)

    for factory in rotated(args.perf, round_):
        await run_system(factory, body, base)


@dataclass
class PeersOptions:
    rounds: int = 3
    writes: int = 200  # sequential writes per phase
    seconds: float = 5.0  # per throughput point
    idle: float = 5.0  # idle seconds before reading RSS
    systems: str = HEADLINE
    tls: bool = False
    cpu_hog: bool = False
    ab: list[str] = field(default_factory=list)
    ab_tree: list[str] = field(default_factory=list)
    workdir: Path | None = None
    perf: list[Factory] = field(default_factory=list)  # what the run measures, from the options above

    @classmethod
    def quick(cls, **given: Any) -> PeersOptions:
        """A smoke run: one round, fewer writes, shorter phases (options given explicitly still win)."""
        return cls(**{"rounds": 1, "writes": 50, "seconds": 2.0, "idle": 2.0, **given})


def systems_of(options: PeersOptions, base: Path) -> list[Factory]:
    if options.tls:
        tls = BenchTls.create(base / "pki")
        return [
            lambda: OursSystem(3),
            lambda: OursSystem(3, tls=tls),
            lambda: EtcdSystem(3),
            lambda: EtcdSystem(3, tls=tls),
        ]
    variants = [ab_variant(setting) for setting in options.ab]
    for index, revision in enumerate(options.ab_tree):
        tree = base / f"ab-tree-{index}"
        export_tree(revision, tree)
        variants.append(tree_variant(revision, tree))
    chosen = selected(PERF + variants + FLOOR, options.systems)
    if not chosen:
        choices = ", ".join(f().label for f in PERF + variants + FLOOR)
        raise SystemExit(f"--systems {options.systems!r} matches none of: {choices}")
    return chosen


async def run_async(options: PeersOptions) -> Results:
    results = new_results()
    base = Path(tempfile.mkdtemp(prefix="coordinated-peers-", dir=options.workdir))
    try:
        options.perf = systems_of(options, base)
        for round_ in range(options.rounds):
            print(f"== round {round_ + 1}/{options.rounds}", flush=True)
            await perf_round(options, results, base, round_)
    finally:
        shutil.rmtree(base, ignore_errors=True)  # etcd preallocates its WAL: ~2 GB after a full run
    return results


def run(options: PeersOptions) -> dict[str, Any]:
    """Runs the suite and returns its results section: the options, the etcd check and the figures."""
    results = asyncio.run(run_async(options))
    if options.tls:
        print_tls_cost(results)
    check = etcd_check(results)
    settings: dict[str, Any] = {
        "rounds": options.rounds,
        "writes": options.writes,
        "seconds": options.seconds,
        "tls": options.tls,
    }
    settings |= {"cpu_hog": options.cpu_hog, "systems": options.systems}
    return {"options": settings, "etcd_check": check, "results": results}


def print_tls_cost(results: Results) -> None:
    """Medians over the rounds (min-max in brackets), TLS off -> on, and the change of the medians."""
    metrics = ("seq_p50", "seq_p99", "tput_1", "tput_16", "tput_64")
    for system in ("coordinated 3n", "etcd 3n"):
        plain, tls = results.get(system), results.get(f"{system} TLS")
        if not plain or not tls:
            continue
        print(f"TLS cost, {system} (ms for seq, writes/s for tput):")
        for metric in metrics:
            off, on = statistics.median(plain[metric]), statistics.median(tls[metric])
            print(
                f"  {metric:8s} {off:8.2f} [{min(plain[metric]):.2f}-{max(plain[metric]):.2f}] -> {on:8.2f} "
                f"[{min(tls[metric]):.2f}-{max(tls[metric]):.2f}]  ({(on / off - 1) * 100:+.0f}%)"
            )
