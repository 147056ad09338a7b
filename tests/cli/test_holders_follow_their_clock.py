"""`coordinated lock` and `coordinated elect` follow their own clock: a holder whose only node is killed or
stopped (SIGSTOP) stops its command, or stops claiming the leadership, before the cluster ends its session
and gives the lock to the next holder. Two holders, one cut off, and the record of when each acted: they
never overlap."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from child_processes import ChildProcesses

from coordinated.tools.localcluster import LocalCluster, LocalNode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TTL = "3"
# A holder's command: one line per 20 ms with the time (CLOCK_MONOTONIC, the same for every process here),
# ignoring SIGTERM, so that only the SIGKILL after the grace ends it.
HOLDER = """
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[1], "a") as out:
    while True:
        out.write(f"{time.monotonic()}\\n")
        out.flush()
        time.sleep(0.02)
"""


def three_nodes(make_cluster: Callable[..., LocalCluster]) -> tuple[LocalCluster, LocalNode, list[LocalNode]]:
    """A 3-node cluster, one of its followers (the cut-off holder's only node) and the other two nodes."""
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master(nodes=3)
    follower = next(node for node in nodes if node is not master)
    return cluster, follower, [node for node in nodes if node is not follower]


def cli(processes: ChildProcesses, nodes: list[LocalNode], *args: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "COORDINATED_ENDPOINTS": ",".join(node.url for node in nodes),
        "COORDINATED_TIMEOUT": "10",
    }
    command = [sys.executable, "-m", "coordinated.cli", *args]
    return processes.start(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def times_in(path: Path) -> list[float]:
    return [float(line) for line in path.read_text().split()] if path.exists() else []


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.02)


def test_a_lock_holder_whose_node_is_killed_stops_its_command_before_the_next_holder_starts(
    make_cluster: Callable[..., LocalCluster], processes: ChildProcesses, tmp_path: Path
) -> None:
    cluster, cut_off, others = three_nodes(make_cluster)
    first_log, second_log = tmp_path / "first", tmp_path / "second"
    lock = ["lock", "locks/partition", "--ttl", TTL, "--", sys.executable, "-c", HOLDER]
    first = cli(processes, [cut_off], *lock, str(first_log))
    wait_until(lambda: bool(times_in(first_log)), 30, "the first holder runs its command")
    second = cli(processes, others, *lock, str(second_log))
    time.sleep(0.5)  # the second is queued behind the first
    assert not times_in(second_log)
    cluster.kill(cut_off)  # the first holder's only node: no keepalive reaches the cluster any more
    wait_until(lambda: bool(times_in(second_log)), 30, "the second holder runs its command")
    _, errors = first.communicate(timeout=30)
    assert first.returncode == 1 and "lost the lock [locks/partition]" in errors, errors
    assert "SIGKILL" in errors and errors.startswith("Error: ") and errors.count("\n") == 1, errors
    first_ran, second_ran = times_in(first_log), times_in(second_log)
    # The first holder's command (which ignored SIGTERM) was killed before the second one's first line.
    assert max(first_ran) < min(second_ran), (max(first_ran), min(second_ran))
    second.send_signal(signal.SIGTERM)
    assert second.wait(30) == 130  # interrupted: the command stopped, the lock released


def test_a_leader_whose_node_is_stopped_stops_claiming_before_the_next_leader_is_elected(
    make_cluster: Callable[..., LocalCluster], processes: ChildProcesses
) -> None:
    cluster, cut_off, others = three_nodes(make_cluster)
    lines: list[tuple[str, float, str]] = []  # (who, when read, line)

    def read(who: str, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            lines.append((who, time.monotonic(), line))

    def said(who: str, text: str) -> list[float]:
        return [when for name, when, line in lines if name == who and text in line]

    def start(who: str, nodes: list[LocalNode]) -> subprocess.Popen[str]:
        process = cli(processes, nodes, "elect", "elections/partition", who, "--ttl", TTL)
        for stream in (process.stdout, process.stderr):
            threading.Thread(target=read, args=(who, stream), daemon=True).start()
        return process

    alice = start("alice", [cut_off])
    wait_until(lambda: bool(said("alice", "alice")), 30, "alice leads")
    bob = start("bob", others)
    time.sleep(0.5)
    assert not said("bob", "bob")  # queued behind alice
    cluster.kill(cut_off, signal.SIGSTOP)  # alice's only node stops answering: her keepalives hang
    try:
        wait_until(lambda: bool(said("bob", "bob")), 30, "bob leads")
        assert alice.wait(30) == 1
        time.sleep(0.1)  # the reader threads have the last lines
        stopped = said("alice", "no longer the leader of [elections/partition]")
        assert stopped, lines
        assert stopped[0] < said("bob", "bob")[0], lines
    finally:
        cluster.kill(cut_off, signal.SIGCONT)
    bob.send_signal(signal.SIGTERM)
    assert bob.wait(30) == 0
