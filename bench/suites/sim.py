"""Simulator throughput and time to stabilise.

    .venv/bin/python -m bench sim

Prints simulated steps per second (wall clock) under a random fault schedule, and the virtual and wall
time a fresh cluster of 5 and of 25 nodes takes to elect a master and settle its voting configuration.
There is no peer to compare a simulator with; the figures track this code's own speed over time.
"""

from __future__ import annotations

import statistics
import time

from coordinated.coordination.coordinator import Mode
from coordinated.simulation.chaos import run_random_schedule
from coordinated.simulation.cluster import SimulatedCluster


def settled(cluster: SimulatedCluster) -> bool:
    """Settled with a full-size voting configuration, and no node left a candidate."""
    expected = len(cluster.nodes) - (len(cluster.nodes) + 1) % 2
    return cluster.settled(expected) and all(
        node.running().status().mode is not Mode.CANDIDATE for node in cluster.nodes
    )


def time_to_stabilise(nodes: int, seed: int) -> tuple[int, float]:
    started = time.perf_counter()
    cluster = SimulatedCluster(seed, nodes)
    assert cluster.run_until(lambda: settled(cluster), 120_000, step=10)
    return cluster.now, time.perf_counter() - started


def main() -> None:
    print("simulated steps per second (random faults and 3 clients, 30 s virtual chaos):")
    for nodes in (5, 25):
        rates = []
        for seed in range(3):
            started = time.perf_counter()
            report = run_random_schedule(seed, nodes)
            rates.append(report.steps / (time.perf_counter() - started))
        print(f"  {nodes:2d} nodes: median {statistics.median(rates):,.0f} steps/s (min {min(rates):,.0f})")
    print("time to stabilise from a cold start (election, joins, voting configuration):")
    for nodes in (5, 25):
        runs = [time_to_stabilise(nodes, seed) for seed in range(5)]
        virtual = statistics.median(v for v, _ in runs)
        wall = statistics.median(w for _, w in runs)
        print(f"  {nodes:2d} nodes: median {virtual} ms virtual, {wall * 1000:.0f} ms wall")


if __name__ == "__main__":
    main()
