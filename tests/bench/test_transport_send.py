"""`python -m bench transport-send` completes its rounds both ways: every message of every round reaches its receiver
(a lost one would leave the round waiting until the timeout), and it prints the figures it promises."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from child_processes import ChildProcesses

ROOT = Path(__file__).resolve().parents[2]


def test_both_ways_deliver_every_round_and_report_the_ratio(processes: ChildProcesses) -> None:
    argv = [
        sys.executable,
        "-m",
        "bench",
        "transport-send",
        "--destinations",
        "3",
        "--per-turn",
        "2",
        "--rounds",
        "50",
        "--runs",
        "1",
    ]
    out = processes.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120, check=True).stdout
    per_message = {
        name: float(value)
        for name, value in re.findall(
            r"^  (transport|anchor)[^:]*: [\d.]+ us CPU per round, ([\d.]+) per message", out, re.M
        )
    }
    assert set(per_message) == {"transport", "anchor"} and all(value > 0 for value in per_message.values())
    assert re.search(r"transport / anchor: \d+\.\d\dx", out)
