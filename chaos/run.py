"""One chaos run: network, 5 nodes, clients + nemesis, heal, final reads, checks, summary, cleanup.

python -m chaos run [--seconds N] [--seed S]     (CHAOS_MINUTES / CHAOS_SEED from the environment)
python -m chaos cleanup                          (safe to run any number of times)
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from chaos import checks, netns
from chaos.clients import Recorder, client_loop, final_reads
from chaos.nemesis import Fault, run_nemesis
from chaos.workloads import Counters, LockRecord, cas_loop, check_counters, check_lock, lock_loop
from coordinated.tools.localcluster import FAST_SETTINGS, LocalCluster

NODES = 5
CLIENTS = 5
CAS_CLIENTS = 2
LOCK_CLIENTS = 3


def cleanup() -> None:
    """Stop every process inside our namespaces (by PID), then remove namespaces, bridge and host rules."""
    for ns in netns.namespaces():
        for pid in netns.ns_pids(ns):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
    netns.destroy()


async def workload(cluster: LocalCluster, names: list[str], seconds: float, seed: int) -> dict[str, object]:
    urls = [cluster.nodes[name].url for name in names]
    rec, faults, crashes, stop = Recorder(), list[Fault](), list[str](), asyncio.Event()
    started = time.monotonic()
    until = started + seconds
    counters, locks = Counters(), LockRecord()
    tasks = [client_loop(i, urls, random.Random(seed * 1000 + i), stop, rec, started) for i in range(CLIENTS)]
    for i in range(CLIENTS, CLIENTS + CAS_CLIENTS):
        tasks.append(cas_loop(i, urls, random.Random(seed * 1000 + i), stop, rec, counters, started))
    for i in range(CLIENTS + CAS_CLIENTS, CLIENTS + CAS_CLIENTS + LOCK_CLIENTS):
        tasks.append(lock_loop(i, urls, random.Random(seed * 1000 + i), stop, locks))
    await asyncio.gather(run_nemesis(seed, cluster, names, until, faults, crashes, stop), *tasks)
    ended = time.monotonic()
    await asyncio.to_thread(cluster.wait_master, 60.0, NODES)
    final = await final_reads(list(urls), rec)
    return {
        "rec": rec,
        "faults": faults,
        "crashes": crashes,
        "final": final,
        "started": started,
        "ended": ended,
        "counters": counters,
        "locks": locks,
    }


def summarize(out: dict[str, object], workdir: Path, cluster: LocalCluster, seed: int) -> bool:
    rec: Recorder = out["rec"]  # type: ignore[assignment]
    faults: list[Fault] = out["faults"]  # type: ignore[assignment]
    crashes: list[str] = out["crashes"]  # type: ignore[assignment]
    final: dict[str, object] = out["final"]  # type: ignore[assignment]
    kinds = Counter((op.kind, "ok" if op.certain else "unknown") for op in rec.operations)
    print(
        f"\n== chaos summary (seed {seed}, {NODES} nodes, {CLIENTS} key clients, {CAS_CLIENTS} CAS counter clients, "
        f"{LOCK_CLIENTS} lock clients)"
    )
    print(
        f"operations: {len(rec.operations)} recorded, {rec.failed} failed without effect; "
        + ", ".join(f"{k[0]} {k[1]}: {n}" for k, n in sorted(kinds.items()))
    )
    print(
        f"faults: {len(faults)}; " + ", ".join(f"{k}: {n}" for k, n in sorted(Counter(f.kind for f in faults).items()))
    )
    windows = checks.unavailability(rec.ok_times, out["started"], out["ended"])  # type: ignore[arg-type]
    total = sum(length for _, length in windows)
    print(
        f"unavailability (>1 s without a successful operation): {len(windows)} window(s), {total:.1f} s in all, max {max((w[1] for w in windows), default=0):.1f} s"
    )
    for at, length in windows:
        during = [
            f.detail for f in faults if f.started - out["started"] <= at + length and f.ended - out["started"] >= at
        ]  # type: ignore[operator]
        print(f"   at {at:6.1f} s for {length:5.1f} s   during: {'; '.join(during) or '-'}")
    results: dict[str, tuple[bool, str]] = {}
    checks.dump(rec.operations, faults, workdir / "operations.jsonl")
    began = time.monotonic()
    ok, detail = checks.linearizable(rec.operations)
    if not ok:
        (workdir / "linearizability.txt").write_text(detail)
        verdict_line = detail.splitlines()[0]
        detail = f"{verdict_line}; {checks.stale_reads(rec.operations)} (details in {workdir / 'linearizability.txt'})"
    results["linearizable"] = (ok, detail)
    print(f"(linearizability check took {time.monotonic() - began:.1f} s)")
    writes = [op for op in rec.operations if op.kind != "get"]
    lost = checks.lost_writes(rec.acked_writes, final, writes)
    results["acknowledged writes kept"] = (not lost, "ok" if not lost else "; ".join(lost[:5]))
    results["cas counters"] = check_counters(out["counters"], final)  # type: ignore[arg-type]
    results["lock with fencing tokens"] = check_lock(out["locks"])  # type: ignore[arg-type]
    results["no unexpected node exits"] = (not crashes, "ok" if not crashes else "; ".join(crashes))
    history_dirs = [node.data_dir / "history" for node in cluster.nodes.values()]
    began = time.monotonic()
    results["audit"] = checks.audit(history_dirs, workdir / "audit")
    print(f"(audit took {time.monotonic() - began:.1f} s)")
    for name, (ok, detail) in results.items():
        print(f"check {name}: {'PASS' if ok else 'FAIL'}  {detail}")
    return all(ok for ok, _ in results.values())


# The run's namespaces, bridge and ports have fixed names: a second run at the same time would tear down the
# first one's network (its start-up removes leftovers). Runs on one machine therefore take turns.
RUN_LOCK = Path(tempfile.gettempdir()) / "coordinated-chaos.lock"


def run(seconds: float, seed: int) -> int:
    with RUN_LOCK.open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"another chaos run holds {RUN_LOCK}: waiting for it to finish", flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        reason = netns.available()
        if reason is not None:
            print(f"network namespaces are unavailable here: {reason}")
            return 2
        return _run_alone(seconds, seed)


def _run_alone(seconds: float, seed: int) -> int:
    cleanup()  # leftovers of an earlier run that was itself killed
    # SIGTERM (a CI timeout, `make` interrupted) must still reach the `finally` below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workdir = Path(tempfile.mkdtemp(prefix="coordinated-chaos-"))
    print(f"chaos run: {seconds:.0f} s of faults, seed {seed}, workdir {workdir}", flush=True)
    hosts = [netns.node_ip(i) for i in range(NODES)]
    cluster = LocalCluster(
        workdir, settings=FAST_SETTINGS, hosts=hosts, argv_prefix=lambda i: ["ip", "netns", "exec", netns.ns_name(i)]
    )
    try:
        netns.create(NODES)
        names = [node.name for node in cluster.bootstrap(NODES, timeout=60)]
        out = asyncio.run(workload(cluster, names, seconds, seed))
        cluster.stop_all(graceful=True)
        return 0 if summarize(out, workdir, cluster, seed) else 1
    finally:
        cluster.stop_all(graceful=False)
        cleanup()
