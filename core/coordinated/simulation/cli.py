"""`coordinated simulate`: one seeded random fault schedule on the deterministic simulator."""

from __future__ import annotations

import time
from pathlib import Path

import click

from coordinated.programs import run_program
from coordinated.simulation.chaos import run_random_schedule
from coordinated.simulation.cluster import SafetyViolation


@click.command("simulate", help=__doc__, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--seed", type=int, default=1, help="the run is a pure function of the seed (default 1)")
@click.option("--nodes", type=click.IntRange(1, 99), default=5, metavar="N", help="node count (5)")
@click.option("--chaos-seconds", type=int, default=30, help="virtual seconds of faults (30)")
@click.option("--sessions", type=int, default=0, help="clients holding sessions with ephemeral keys (0)")
@click.option(
    "--histories", type=click.Path(path_type=Path), help="write each node's history (JSON Lines) into this folder"
)
def simulate(seed: int, nodes: int, chaos_seconds: int, sessions: int, histories: Path | None) -> int:
    started = time.perf_counter()
    try:
        report = run_random_schedule(seed, nodes, chaos_ms=chaos_seconds * 1000, sessions=sessions)
    except SafetyViolation as violation:
        print(f"FAILED: {violation}")
        return 1
    elapsed = time.perf_counter() - started
    cluster = report.cluster
    assert cluster is not None and report.linearizability is not None
    leader = cluster.leader()
    print(f"seed {seed}, {nodes} nodes: {report.virtual_ms / 1000:.1f}s virtual in {elapsed:.2f}s wall")
    print(f"  steps: {report.steps} ({report.steps / elapsed:,.0f}/s)")
    print(f"  faults: {', '.join(f'{kind} x{count}' for kind, count in sorted(report.faults.items()))}")
    print(f"  operations: {report.operations} completed, {report.acknowledged_writes} acknowledged writes")
    if leader is not None:
        state = leader.running().applied_state
        print(f"  final: master {leader.name}, term {state.term}, version {state.version}")
        print(f"  voting configuration: {list(state.last_committed_config.node_ids)}")
    if sessions:
        print(f"  sessions: {report.sessions} created and checked")
    print(f"  safety checks after every step: ok; linearizable: {report.linearizability.ok}")
    if histories:
        paths = cluster.write_histories(histories)
        print(f"  histories: {len(paths)} files in {histories}")
    if not report.linearizability.ok:
        print(report.linearizability.detail)
        return 1
    return 0


def main(argv: list[str]) -> int:
    return run_program(simulate, argv, "coordinated simulate")
