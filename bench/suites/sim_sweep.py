"""Many random fault schedules on the simulator, in parallel, counting every failure instead of stopping.

    .venv/bin/python -m bench sim-sweep --schedules 10000 [--first-seed 1000000] [--workers 2]

Schedule i uses seed first_seed + i on 3 + i % 5 nodes (3 to 7), with every fault the random schedules
draw (partitions, drops, crashes, I/O errors and storage faults at restarts). Each is checked as the test
suite checks it: safety after every step, then stability and linearizability. Prints the failing seeds
with the command that replays each, the fault totals, and the wall and CPU time.
"""

from __future__ import annotations

import resource
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

from coordinated.simulation.chaos import run_random_schedule


def run_one(seed_and_nodes: tuple[int, int]) -> tuple[int, int, str | None, Counter[str]]:
    seed, nodes = seed_and_nodes
    try:
        report = run_random_schedule(seed, nodes)
    except AssertionError as error:  # a safety or liveness check failed
        return seed, nodes, str(error).splitlines()[0], Counter()
    verdict = report.linearizability
    if verdict is None or not verdict.ok:
        return seed, nodes, f"not linearizable: {verdict.detail if verdict else 'no verdict'}", report.faults
    if report.operations == 0:
        return seed, nodes, "the clients completed no operations", report.faults
    return seed, nodes, None, report.faults


def main(schedules: int, first_seed: int, workers: int) -> int:
    """Runs the sweep and prints what it found; returns the number of failed schedules."""
    work = [(first_seed + i, 3 + i % 5) for i in range(schedules)]
    started = time.monotonic()
    failures: list[tuple[int, int, str]] = []
    faults: Counter[str] = Counter()
    with ProcessPoolExecutor(workers) as pool:
        for done, (seed, nodes, failure, counted) in enumerate(pool.map(run_one, work, chunksize=8), start=1):
            faults.update(counted)
            if failure is not None:
                failures.append((seed, nodes, failure))
                print(f"FAIL seed {seed} nodes {nodes}: {failure}", flush=True)
            if done % 500 == 0:
                print(f"{done}/{len(work)} schedules, {len(failures)} failed, {time.monotonic() - started:.0f} s")
    wall = time.monotonic() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # the workers, reaped when the pool closed
    print(f"\n{len(work)} schedules, seeds {first_seed}..{first_seed + len(work) - 1}: {len(failures)} failed")
    print(f"wall {wall:.0f} s with {workers} workers (workers' CPU {usage.ru_utime + usage.ru_stime:.0f} s)")
    print("faults injected: " + ", ".join(f"{name} {count}" for name, count in sorted(faults.items())))
    for seed, nodes, failure in failures:
        print(
            f"  replay: .venv/bin/pytest tests/coordination/test_random_schedules.py --sim-seed {seed} "
            f"--sim-nodes {nodes}  # {failure}"
        )
    return len(failures)
