"""Hot-key throughput: many clients writing few keys, ours against etcd (gRPC) in one run, interleaved round after
round. Every acknowledged write of a key gets its own version, so our master writes each key at most once per
publication and leaves further writes of it for the next one (etcd gives each write its own revision within one
raft batch). This suite measures what that costs: 16 clients writing 1 key, and 64 clients writing 16 keys (4 a
key), each beside the same client count on keys of their own (no contention), in the same phase.

    python -m bench hot-keys [--rounds 3] [--seconds 5] [--out results.json]
    python -m bench hot-keys --ab-tree main --systems 'coordinated 3n,coordinated 3n [main],etcd 3n'

Prints figures and never asserts timings; with --out, adds a `hot-keys` section to that results file.
Everything runs on 127.0.0.1, and every process started is stopped by PID, also on failure.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness.etcd_check import etcd_check
from bench.harness.machine import CpuMeter, conditions
from bench.harness.measure import sequential, throughput
from bench.harness.rounds import Results, new_results, rotated, run_system
from bench.harness.systems import System
from bench.suites.peers import PeersOptions, conditions_text, systems_of

# (figure, clients, shared keys: None for keys of each client's own)
POINTS: tuple[tuple[str, int, int | None], ...] = (
    ("hot_16_on_1", 16, 1),
    ("tput_16", 16, None),
    ("hot_64_on_16", 64, 16),
    ("tput_64", 64, None),
)
SYSTEMS = "coordinated 3n,etcd 3n"


@dataclass
class HotKeysOptions:
    rounds: int = 3
    seconds: float = 5.0  # per point
    systems: str = SYSTEMS
    ab_tree: list[str] = field(default_factory=list)
    workdir: Path | None = None


async def measure(system: System, leader: int, options: HotKeysOptions, r: Any) -> None:
    pids = [system.pid(i) for i in range(system.size)]
    await sequential(system, leader, 20)  # warm-up
    r["seq_p50"].append((await sequential(system, leader, 100))["p50"])  # for the etcd check
    first = (leader + 1) % system.size
    for figure, clients, shared in POINTS:
        with CpuMeter(pids, None) as meter:
            tput = await throughput(system, clients, options.seconds, first, shared_keys=shared)
        r[figure].append(tput["rate"])
        per_write = meter.per_write(int(tput["writes"]), pids[leader])
        where = f"on {shared} key{'s' if shared != 1 else ''}" if shared else "on their own keys"
        errors = f" ({tput['errors']} err)" if tput["errors"] else ""
        print(
            f"{system.label:28s} {clients:2d} clients {where:18s} {tput['rate']:7.1f}/s{errors}   "
            f"cpu/write {per_write['system_ms']:.2f} ms",
            flush=True,
        )


async def run_async(options: HotKeysOptions) -> Results:
    results = new_results()
    base = Path(tempfile.mkdtemp(prefix="coordinated-hot-keys-", dir=options.workdir))
    try:
        factories = systems_of(PeersOptions(systems=options.systems, ab_tree=options.ab_tree), base)

        async def body(system: System, workdir: Path) -> None:
            r = results[system.label]
            leader = await system.wait_healthy()
            before = conditions(workdir)
            await measure(system, leader, options, r)
            after = conditions(workdir)
            r["conditions"].append({"before": before, "after": after})
            print(
                f"{system.label:28s} before: {conditions_text(before)}\n{system.label:28s} after:  {conditions_text(after)}"
            )

        for round_ in range(options.rounds):
            print(f"== round {round_ + 1}/{options.rounds}", flush=True)
            for factory in rotated(factories, round_):
                await run_system(factory, body, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return results


def run(options: HotKeysOptions) -> dict[str, Any]:
    results = asyncio.run(run_async(options))
    settings = {"rounds": options.rounds, "seconds": options.seconds, "systems": options.systems}
    return {"options": settings, "etcd_check": etcd_check(results), "results": results}
