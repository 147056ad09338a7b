"""The engines bench's CPU figure sees work shorter than a clock tick: a DuckDB round over a small input can
take a few milliseconds of this process's CPU, which /proc's per-process counters (in 10 ms ticks) report as 0."""

from __future__ import annotations

import time

from bench.suites.audit_engines import tree_cpu_s


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_millisecond_of_work_in_this_process_counts() -> None:
    deltas = []
    for _ in range(5):
        before = tree_cpu_s()
        _spin(0.001)
        deltas.append(tree_cpu_s() - before)
    assert all(delta > 0 for delta in deltas), deltas
