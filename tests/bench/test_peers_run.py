"""The headline suite end to end, cut short: ours and etcd (make test installs etcd-server) are started, measured
with the shared harness and stopped by PID, their figures land in a results file, and the report renders it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import ROOT
from bench.harness import results
from bench.report import performance_page

pytestmark = pytest.mark.integration

FIGURES = ("seq_p50", "seq_p99", "tput_1", "tput_16", "tput_64")


def test_a_short_peers_run_measures_both_systems_and_renders(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    argv = [sys.executable, "-m", "bench", "peers", "--systems", "coordinated 3n,etcd 3n", "--rounds", "1"]
    argv += ["--writes", "10", "--seconds", "0.5", "--idle", "0", "--workdir", str(tmp_path), "--out", str(out)]
    subprocess.run(argv, cwd=ROOT, check=True, timeout=300)
    section = results.read(out)["suites"]["peers"]
    for label in ("coordinated 3n", "etcd 3n"):
        figures = section["results"][label]
        assert all(len(figures[name]) == 1 and figures[name][0] > 0 for name in FIGURES), (label, figures)
        assert figures["conditions"] and figures["cpu"]
    page = performance_page(results.read(out))
    assert "| sequential write, p50 | lower | **" in page and "3 nodes: ours / etcd" in page
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("coordinated-peers-")]  # data dirs removed
