"""Micro-benchmark of the in-memory write path: what one write costs the core at 10, 10k and 100k keys.

For each state size it times, per one-key write:
- `next state + diff` (master): the batch builds the next state and publication computes its diff;
- `apply diff` (follower): rebuild the published state from a one-key diff;
- `encode diff`: the bytes sent to each follower;
- `encode state`: a full encoding (what a node that needs the whole state is sent).

"after" is the code in this tree; "before" is the same measurement run on the core of another revision
(`--before`, default main: plain dicts copied per change, diffs by comparing whole maps), extracted with
`git archive` to a temporary directory. Both run in child processes, alternated `--runs` times in the same
invocation; each figure is the best of the runs' medians (the shared machine only ever slows a run down).

    .venv/bin/python bench/state_ops.py [--before REV] [--sizes 10,10000,100000] [--repeat 200] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from coordinated.coordination.batch import BatchContext, execute_batch
from coordinated.coordination.client import KvPut
from coordinated.coordination.state import (
    ClusterState,
    ClusterStateDiff,
    DiscoveryNode,
    KeyVersion,
    apply_diff,
    compute_diff,
    encode_diff,
    encode_state,
)
from coordinated.coordination.tasks import ClientTask

MASTER = DiscoveryNode("n1", "node-1", "n1:9300")


def _state(keys: int) -> ClusterState:
    kv = {f"key-{index:06d}": {"value": index, "owner": "bench"} for index in range(keys)}
    versions = {key: KeyVersion(1, 1) for key in kv}
    return ClusterState(
        cluster_name="bench",
        cluster_uuid="c1",
        version=1,
        state_uuid="s1",
        master_node="n1",
        nodes={"n1": MASTER},
        kv=kv,
        kv_versions=versions,
    )


def _timed(action: Callable[[], object], repeat: int) -> float:
    """The median time of one call, in microseconds."""
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1e6


def _chain(state: ClusterState, context: BatchContext, length: int) -> list[ClusterState]:
    """`length` states, each a one-key write on the one before."""
    states = []
    for index in range(length):
        write = [ClientTask(KvPut(f"key-{index % 7:06d}", {"value": -index, "owner": "bench"}))]
        state, _ = execute_batch(state, write, context)
        assert state is not None
        states.append(state)
    return states


def _timed_each(states: list[ClusterState], action: Callable[[ClusterState], object]) -> float:
    """The median time of `action` on each state in turn, in microseconds."""
    samples = []
    for state in states:
        started = time.perf_counter()
        action(state)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1e6


def measure(keys: int, repeat: int) -> dict[str, float]:
    state = _state(keys)
    uuids = (f"u{n}" for n in range(10**9))
    context = BatchContext(MASTER, 1, {"n1"}, 10, True, lambda: next(uuids))
    write = [ClientTask(KvPut("key-000005", {"value": -1, "owner": "bench"}))]

    def next_and_diff() -> tuple[ClusterState, ClusterStateDiff]:
        new, _ = execute_batch(state, write, context)
        assert new is not None
        return new, compute_diff(state, new)

    _, diff = next_and_diff()
    return {
        "next state + diff": _timed(next_and_diff, repeat),
        "apply diff": _timed(lambda: apply_diff(state, diff), repeat),
        "encode diff": _timed(lambda: encode_diff(diff), repeat),
        # Each state of a chain once, one after the other, as a node persisting what it accepts does.
        "encode state": _timed_each(_chain(state, context, max(5, repeat // 10)), encode_state),
    }


def _worker(pythonpath: str | None, sizes: str, repeat: int) -> dict[str, dict[str, float]]:
    """This measurement in a child process, on the core found first on `pythonpath` (None: this tree's)."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    command = [sys.executable, __file__, "--worker", "--sizes", sizes, "--repeat", str(repeat)]
    done = subprocess.run(command, env=env, check=True, capture_output=True, text=True, timeout=1800)
    figures: dict[str, dict[str, float]] = json.loads(done.stdout)
    return figures


def _best(runs: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per figure, the lowest of the runs' medians: the run least disturbed by the shared machine."""
    return {
        size: {operation: min(run[size][operation] for run in runs) for operation in runs[0][size]} for size in runs[0]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10,10000,100000", help="state sizes in keys, comma-separated")
    parser.add_argument("--repeat", type=int, default=200, help="timed calls per figure (median)")
    parser.add_argument("--before", default="main", help="the git revision measured as 'before'")
    parser.add_argument("--runs", type=int, default=3, help="alternated before/after runs (best taken)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    if args.worker:
        print(json.dumps({str(keys): measure(keys, args.repeat) for keys in sizes}))
        return
    root = Path(__file__).resolve().parent.parent
    befores, afters = [], []
    with tempfile.TemporaryDirectory(prefix="state-ops-") as tmp:
        archive = subprocess.run(
            ["git", "-C", str(root), "archive", args.before, "core"], check=True, capture_output=True
        )
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        for _ in range(args.runs):  # alternated, so that a slow phase of the machine hits both
            befores.append(_worker(f"{tmp}/core", args.sizes, args.repeat))
            afters.append(_worker(None, args.sizes, args.repeat))
    before, after = _best(befores), _best(afters)
    print(
        f"before = {args.before}, after = this tree; best of {args.runs} alternated runs of the median of {args.repeat} calls"
    )
    print(f"{'keys':>8} | {'operation':<18} | {'before (us)':>12} | {'after (us)':>11} | {'speed-up':>8}")
    print(f"{'-' * 8}-+-{'-' * 18}-+-{'-' * 12}-+-{'-' * 11}-+-{'-' * 8}")
    for keys in sizes:
        for operation, was in before[str(keys)].items():
            now = after[str(keys)][operation]
            print(f"{keys:>8} | {operation:<18} | {was:>12.1f} | {now:>11.1f} | {was / now:>7.1f}x")


if __name__ == "__main__":
    main()
