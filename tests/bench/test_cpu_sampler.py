"""bench/harness/cpu_sampler.py samples on CPU time: a busy function collects samples, a sleeping one does not, and the
samples can be cleared after a warm-up and written on demand in py-spy's raw format."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from child_processes import ChildProcesses

SAMPLER = Path(__file__).resolve().parents[2] / "bench" / "harness" / "cpu_sampler.py"

WORKLOAD = """
import signal, sys, time

def warm_up():
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass

def busy():
    end = time.process_time() + 0.6
    while time.process_time() < end:
        pass

def asleep():
    time.sleep(0.6)

warm_up()
print("warm", flush=True)
sys.stdin.readline()  # the test clears the samples here
busy()
asleep()
print("done", flush=True)
sys.stdin.readline()  # the test asks for the samples here
"""


def until_line(process: subprocess.Popen[str], expected: str) -> None:
    assert process.stdout is not None
    assert process.stdout.readline().strip() == expected


def test_samples_follow_cpu_time_and_can_be_cleared_and_written(tmp_path: Path, processes: ChildProcesses) -> None:
    (tmp_path / "workload.py").write_text(WORKLOAD)
    out = tmp_path / "samples.txt"
    process = processes.start(
        [sys.executable, str(SAMPLER), str(out), sys.executable, "-m", "workload"],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert process.stdin is not None
    try:
        until_line(process, "warm")
        process.send_signal(signal.SIGUSR1)
        time.sleep(0.2)
        process.stdin.write("\n")
        process.stdin.flush()
        until_line(process, "done")
        process.send_signal(signal.SIGUSR2)
        deadline = time.monotonic() + 10
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        process.stdin.write("\n")
        process.stdin.flush()
        assert process.wait(10) == 0
    finally:
        if process.poll() is None:
            process.kill()
    samples: dict[str, int] = {}
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        samples[stack] = int(count)
    by_leaf: dict[str, int] = {}
    for stack, count in samples.items():
        leaf = stack.rsplit(";", 1)[-1].split(" (", 1)[0]
        by_leaf[leaf] = by_leaf.get(leaf, 0) + count
    assert all(stack.split(";")[0].startswith("<module> (") for stack in samples), "stacks are written root first"
    assert by_leaf.get("busy", 0) >= 10, by_leaf
    assert "warm_up" not in by_leaf, "the samples taken before SIGUSR1 were cleared"
    assert by_leaf.get("asleep", 0) <= by_leaf["busy"] // 5, "time asleep is not CPU time"


if __name__ == "__main__":
    pytest.main([__file__])
