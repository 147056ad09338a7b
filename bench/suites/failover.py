"""Failover: the unavailability window one sequential writer sees when the leader is killed (kill -9) or
frozen (SIGSTOP), ours against etcd and PySyncObj at 3 nodes, default settings; then SIGSTOP with each
system's failure detection tuned down (the "tuned" rows), interleaved round after round in one run.

    python -m bench failover [--rounds 3] [--kill-trials 4] [--systems 'coordinated 3n,etcd 3n'] [--out FILE]

The window runs from the signal to the first successful write sent after it; the writer rotates to the next
surviving node after an error, with the same client timeout for every system (it rounds windows up), and the
time at which the survivors first agreed on a new leader is reported beside it. A killed node is restarted
and the cluster is healthy again before the next trial. Prints figures and never asserts timings.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness.etcd import EtcdSystem
from bench.harness.measure import CLIENT_TIMEOUT_S, fault_trial
from bench.harness.pysyncobj import PySyncObjSystem
from bench.harness.rounds import Factory, Results, new_results, rotated, run_system, selected
from bench.harness.systems import OursSystem, System

FAULT: list[Factory] = [lambda: OursSystem(3), lambda: EtcdSystem(3), lambda: PySyncObjSystem(3)]
TUNED: list[Factory] = [
    lambda: OursSystem(3, tuned=True),
    lambda: EtcdSystem(3, tuned=True),
    lambda: PySyncObjSystem(3, tuned=True),
]


@dataclass
class FailoverOptions:
    rounds: int = 3
    kill_trials: int = 4  # kill -9 trials per round and system
    stop_trials: int = 1  # SIGSTOP trials per round, default settings
    tuned_stop_trials: int = 3  # SIGSTOP trials per round, tuned failure detection
    systems: str | None = None  # comma-separated labels; all by default
    workdir: Path | None = None


async def fault_round(args: FailoverOptions, results: Results, base: Path, round_: int) -> None:
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


async def run_async(options: FailoverOptions) -> Results:
    results = new_results()
    base = Path(tempfile.mkdtemp(prefix="coordinated-failover-", dir=options.workdir))
    try:
        for round_ in range(options.rounds):
            print(f"== round {round_ + 1}/{options.rounds}", flush=True)
            await fault_round(options, results, base, round_)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return results


def run(options: FailoverOptions) -> dict[str, Any]:
    """Runs the suite and returns its results section."""
    results = asyncio.run(run_async(options))
    settings = {"rounds": options.rounds, "kill_trials": options.kill_trials, "client_timeout_s": CLIENT_TIMEOUT_S}
    return {"options": settings, "results": results}
