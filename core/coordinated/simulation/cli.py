"""`coordinated simulate`: one seeded random fault schedule on the deterministic simulator."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from coordinated.simulation.chaos import run_random_schedule
from coordinated.simulation.cluster import SafetyViolation


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="coordinated simulate", description=__doc__)
    parser.add_argument("--seed", type=int, default=1, help="the run is a pure function of the seed (default 1)")
    parser.add_argument("--nodes", type=int, default=5, choices=range(1, 100), metavar="N", help="node count (5)")
    parser.add_argument("--chaos-seconds", type=int, default=30, help="virtual seconds of faults (30)")
    parser.add_argument("--sessions", type=int, default=0, help="clients holding sessions with ephemeral keys (0)")
    parser.add_argument("--histories", type=Path, help="write each node's history (JSON Lines) into this folder")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        report = run_random_schedule(args.seed, args.nodes, chaos_ms=args.chaos_seconds * 1000, sessions=args.sessions)
    except SafetyViolation as violation:
        print(f"FAILED: {violation}")
        return 1
    elapsed = time.perf_counter() - started
    cluster = report.cluster
    assert cluster is not None and report.linearizability is not None
    leader = cluster.leader()
    print(f"seed {args.seed}, {args.nodes} nodes: {report.virtual_ms / 1000:.1f}s virtual in {elapsed:.2f}s wall")
    print(f"  steps: {report.steps} ({report.steps / elapsed:,.0f}/s)")
    print(f"  faults: {', '.join(f'{kind} x{count}' for kind, count in sorted(report.faults.items()))}")
    print(f"  operations: {report.operations} completed, {report.acknowledged_writes} acknowledged writes")
    if leader is not None:
        state = leader.running().applied_state
        print(f"  final: master {leader.name}, term {state.term}, version {state.version}")
        print(f"  voting configuration: {list(state.last_committed_config.node_ids)}")
    if args.sessions:
        print(f"  sessions: {report.sessions} created and checked")
    print(f"  safety checks after every step: ok; linearizable: {report.linearizability.ok}")
    if args.histories:
        paths = cluster.write_histories(args.histories)
        print(f"  histories: {len(paths)} files in {args.histories}")
    if not report.linearizability.ok:
        print(report.linearizability.detail)
        return 1
    return 0
