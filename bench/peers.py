"""Side-by-side benchmarks: coordinated-cluster vs etcd (gRPC) vs PySyncObj, with one client harness.

    .venv/bin/python bench/peers.py [--quick] [--rounds 3] [--out DIR] [--no-docs]
    .venv/bin/python bench/peers.py --tls [--rounds 2]    # the cost of TLS, ours and etcd's
    .venv/bin/python bench/peers.py --cpu-hog [--systems 'coordinated 3n,etcd 3n'] [--no-faults] [--force]
    .venv/bin/python bench/peers.py --no-faults --no-docs \
        --systems 'coordinated 3n,floor 3n,floor 3n apply-round,etcd 3n'  # against the floor of our stack
    .venv/bin/python bench/peers.py --no-faults --no-docs \
        --systems 'floor 3n apply-round,floor 3n apply-round raw-tcp,etcd 3n'  # the floor on plain TCP streams
    .venv/bin/python bench/peers.py --report OUT/results.json [--doc FILE]   # re-render, no run
    .venv/bin/python bench/peers.py --no-faults --no-docs --ab node.event_loop=asyncio \
        --systems 'coordinated 3n,coordinated 3n [node.event_loop=asyncio],etcd 3n'  # A/B of one lever
    .venv/bin/python bench/peers.py --no-faults --no-docs --ab-tree main \
        --systems 'coordinated 3n,coordinated 3n [main],etcd 3n'  # this tree against another revision

Around each system's phase the run measures the machine (fsync latency, load, CPU/IO pressure, other
processes' CPU) and each system's and the harness's CPU per write, and prints them with the results. A run in
which etcd is far from its known figures here is flagged; its ratios reach the docs only with --force.
With --cpu-hog every system is measured twice, quiet and with a busy loop on one core ("+hog" rows).

With --tls, only the write benchmarks run, for 3 nodes of ours and of etcd, each with TLS off and on (ours:
mutual TLS between nodes and TLS on the client port; etcd: the same on its peer and client ports), and the
medians are printed; docs/benchmarks.md is not rewritten.

Systems are interleaved: each round runs every system once, in a rotated order, so that slow phases of
the shared machine hit all of them. Prints figures and never asserts timings; writes the raw results to
OUT/results.json and (unless --no-docs) the generated part of docs/benchmarks.md plus docs/img/*.png.
Everything runs on 127.0.0.1, and every process started is stopped by PID, also on failure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import statistics
import subprocess
import tempfile
import traceback
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from peers_checks import ETCD, etcd_check
from peers_env import CpuHog, CpuMeter, conditions
from peers_etcd import EtcdSystem
from peers_floor import FloorSystem
from peers_harness import fault_trial, idle_rss, sequential, throughput
from peers_pso import PySyncObjSystem
from peers_report import DOC, HOG, write_report
from peers_systems import OursSystem, System
from peers_tls import BenchTls

Factory = Callable[[], System]
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
FAULT: list[Factory] = [lambda: OursSystem(3), lambda: EtcdSystem(3), lambda: PySyncObjSystem(3)]
TUNED: list[Factory] = [
    lambda: OursSystem(3, tuned=True),
    lambda: EtcdSystem(3, tuned=True),
    lambda: PySyncObjSystem(3, tuned=True),
]
Results = defaultdict[str, defaultdict[str, list[Any]]]


def selected(factories: list[Factory], wanted: str | None) -> list[Factory]:
    """The factories whose system label is one of the comma-separated `wanted` labels (all if None)."""
    if not wanted:
        return factories
    names = {name.strip() for name in wanted.split(",")}
    return [factory for factory in factories if factory().label in names]


def ab_variant(setting: str) -> Factory:
    """3 nodes of ours with one node setting changed (`name=value`), labelled `coordinated 3n [name=value]`: the
    B side of an A/B of one hot-path lever against `coordinated 3n` in the same run."""
    name, sep, value = setting.partition("=")
    if not sep:
        raise SystemExit(f"--ab expects SETTING=VALUE, got {setting!r}")
    return lambda: OursSystem(3, extra={name.strip(): value.strip()})


def export_tree(revision: str, into: Path) -> None:
    """The source of `revision` (core, sidecar, tools) in `into`, for `--ab-tree`."""
    into.mkdir(parents=True)
    root = Path(__file__).resolve().parent.parent
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", revision, "core", "sidecar", "tools"], check=True, capture_output=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)


def rotated(items: list[Factory], by: int) -> list[Factory]:
    if not items:
        return items
    by %= len(items)
    return items[by:] + items[:by]


async def run_system(factory: Factory, body: Callable[[System, Path], Any], base: Path) -> None:
    system = factory()
    workdir = Path(tempfile.mkdtemp(prefix="peer-", dir=base))
    try:
        await system.start(workdir)
        await system.wait_healthy()
        await body(system, workdir)
    except Exception:
        print(f"!! {system.label} failed:")
        traceback.print_exc()
    finally:
        await system.stop()


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


async def measure(system: System, leader: int, args: argparse.Namespace, r: Any, hog: CpuHog | None) -> None:
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
    for clients in (1, 16, 64):
        with CpuMeter(pids, hog_pid) as meter:
            tput = await throughput(system, clients, args.seconds)
        r[f"tput_{clients}"].append(tput["rate"])
        cpu[f"tput_{clients}"] = meter.per_write(int(tput["writes"]), master_pid)
        errors = f" ({tput['errors']} err)" if tput["errors"] else ""
        print(
            f"{system.label:28s} {clients:2d} clients {tput['rate']:7.1f}/s{errors}   {cpu_text(cpu[f'tput_{clients}'])}"
        )
    r["cpu"].append(cpu)


async def perf_round(args: argparse.Namespace, results: Results, base: Path, round_: int) -> None:
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


async def fault_round(args: argparse.Namespace, results: Results, base: Path, round_: int) -> None:
    async def trials(system: System, sig: int, count: int, name: str) -> None:
        r = results[system.label]
        r["detection"] = [system.detection_settings()]
        for _ in range(count):
            try:
                trial = await fault_trial(system, sig)
            except Exception as error:
                print(f"!! {system.label} {name} trial failed: {error!r}")
                r[f"{name}_failed"].append(1)
                continue
            r[f"{name}_window"].append(trial["window"])
            r[f"{name}_observed"].append(trial["observed"])
            print(
                f"{system.label:24s} {name:8s} window {trial['window']:8.1f} ms, "
                f"new leader seen after {trial['observed']:8.1f} ms",
                flush=True,
            )

    async def default_body(system: System, _workdir: Path) -> None:
        await trials(system, signal.SIGKILL, args.kill_trials, "kill9")
        await trials(system, signal.SIGSTOP, args.stop_trials, "sigstop")

    async def tuned_body(system: System, _workdir: Path) -> None:
        await trials(system, signal.SIGSTOP, args.tuned_stop_trials, "sigstop")

    for factory in rotated(selected(FAULT, args.systems), round_):
        await run_system(factory, default_body, base)
    for factory in rotated(selected(TUNED, args.systems), round_):
        await run_system(factory, tuned_body, base)


async def main_async(args: argparse.Namespace) -> Results:
    results: Results = defaultdict(lambda: defaultdict(list))
    base = Path(tempfile.mkdtemp(prefix="coordinated-peers-", dir=args.workdir))
    try:
        if args.tls:
            tls = BenchTls.create(base / "pki")
            args.perf = [
                lambda: OursSystem(3),
                lambda: OursSystem(3, tls=tls),
                lambda: EtcdSystem(3),
                lambda: EtcdSystem(3, tls=tls),
            ]
        else:
            variants = [ab_variant(setting) for setting in args.ab]
            if args.ab_tree:
                tree = base / "ab-tree"
                export_tree(args.ab_tree, tree)
                variants.append(lambda: OursSystem(3, source=(args.ab_tree, tree)))
            args.perf = selected(PERF + variants + FLOOR, args.systems) if args.systems else PERF + variants
            if not args.perf:
                choices = ", ".join(f().label for f in PERF + variants + FLOOR)
                raise SystemExit(f"--systems {args.systems!r} matches none of: {choices}")
        for round_ in range(args.rounds):
            print(f"== round {round_ + 1}/{args.rounds}", flush=True)
            await perf_round(args, results, base, round_)
            if not args.tls and not args.no_faults:
                await fault_round(args, results, base, round_)
    finally:
        shutil.rmtree(base, ignore_errors=True)  # etcd preallocates its WAL: ~2 GB after a full run
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 round, fewer writes and trials (a smoke run)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--writes", type=int, default=200, help="sequential writes per run")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per throughput run")
    parser.add_argument("--idle", type=float, default=5.0, help="idle seconds before reading RSS")
    parser.add_argument("--kill-trials", type=int, default=4, help="kill -9 trials per round")
    parser.add_argument("--stop-trials", type=int, default=1, help="SIGSTOP trials per round, default settings")
    parser.add_argument("--tuned-stop-trials", type=int, default=3, help="SIGSTOP trials per round, tuned")
    parser.add_argument("--workdir", default=None, help="parent of the data dirs (default: the system temp dir)")
    parser.add_argument("--out", default=None, help="where results.json goes (default: the run's temp dir)")
    parser.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md and docs/img")
    parser.add_argument("--tls", action="store_true", help="only the cost of TLS, ours and etcd's (see above)")
    parser.add_argument(
        "--cpu-hog", action="store_true", help="measure every system twice: quiet, then with a busy loop on one core"
    )
    parser.add_argument("--systems", default=None, help="comma-separated labels to run, e.g. 'coordinated 3n,etcd 3n'")
    parser.add_argument("--no-faults", action="store_true", help="skip the failover trials")
    parser.add_argument(
        "--ab",
        action="append",
        default=[],
        metavar="SETTING=VALUE",
        help="also run 'coordinated 3n [SETTING=VALUE]': an A/B of one node setting (repeatable)",
    )
    parser.add_argument(
        "--ab-tree",
        default=None,
        metavar="REV",
        help="also run 'coordinated 3n [REV]': 3 nodes of the sidecar of git revision REV (an A/B of code)",
    )
    parser.add_argument("--doc", default=str(DOC), help="the Markdown file whose generated block is rewritten")
    parser.add_argument("--report", default=None, help="no run: the report of an earlier run's results.json")
    parser.add_argument("--force", action="store_true", help="write ratios to the docs even from a flagged run")
    args = parser.parse_args()
    if args.quick:  # shorter defaults; options given explicitly still win
        quick = {"rounds": 1, "writes": 50, "seconds": 2.0, "idle": 2.0}
        quick |= {"kill_trials": 3, "stop_trials": 1, "tuned_stop_trials": 1}
        for name, value in quick.items():
            if getattr(args, name) == parser.get_default(name):
                setattr(args, name, value)
    if args.report:
        earlier = json.loads(Path(args.report).read_text())
        results: Results = defaultdict(lambda: defaultdict(list))
        for label, figures in earlier["results"].items():
            results[label].update(figures)
        settings = {**earlier["args"], "force": args.force}
        check = etcd_check(results)
    else:
        results = asyncio.run(main_async(args))
        out = Path(args.out or tempfile.mkdtemp(prefix="coordinated-peers-out-"))
        out.mkdir(parents=True, exist_ok=True)
        check = etcd_check(results)
        settings = {key: value for key, value in vars(args).items() if key != "perf"}
        run = {"args": settings, "etcd_check": check, "results": results}
        (out / "results.json").write_text(json.dumps(run, indent=1))
        print(f"raw results: {out / 'results.json'}")
    if args.tls:
        print_tls_cost(results)
    else:
        write_report(results, settings, check, docs=not args.no_docs, doc=Path(args.doc))
    if check["flagged"]:
        print("!" * 100)
        print("!! FLAGGED RUN: etcd is far from its known figures on this machine; its ratios flatter us:")
        for reason in check["reasons"]:
            print(f"!!   {reason}")
        print("!! Look at the fsync latency, load and other processes' CPU printed with each phase.")
        if not args.tls and not args.no_docs:
            forced = "--force: ratios written anyway, under the flag."
            print("!! " + (forced if args.force else "Ratios NOT written to the docs (use --force)."))
        print("!" * 100)


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


if __name__ == "__main__":
    main()
