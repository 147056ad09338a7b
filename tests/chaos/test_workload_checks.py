"""The checks of the chaos run's CAS and lock workloads, on hand-made records: each catches what it is for."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import threading
from pathlib import Path

# The `chaos` package lives at the repository root (it runs as `python -m chaos`), which pytest does not put
# on the path; without it, `chaos` would resolve to this test folder.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pytest

from chaos import netns
from chaos import run as chaos_run
from chaos.workloads import Counters, Holding, LockRecord, check_counters, check_lock
from coordinated.simulation.linearizability import MISSING


def test_counters_end_between_acknowledged_and_possible_increments() -> None:
    counters = Counters(acked={"e0-counter": 5, "e1-counter": 0}, unknown={"e0-counter": 2, "e1-counter": 1})
    assert check_counters(counters, {"e0-counter": 6, "e1-counter": MISSING})[0]
    assert check_counters(counters, {"e0-counter": 7, "e1-counter": 1})[0]
    ok, detail = check_counters(counters, {"e0-counter": 4, "e1-counter": 0})
    assert not ok and "e0-counter: 4" in detail  # an acknowledged increment lost
    assert not check_counters(counters, {"e0-counter": 8, "e1-counter": 0})[0]  # more than ever attempted


def test_the_lock_check_catches_overlaps_repeated_or_falling_tokens_and_refusals() -> None:
    good = LockRecord(holdings=[Holding(1, 10, 0.0, 1.0), Holding(2, 12, 1.5, 2.0), Holding(1, 20, 2.1, 3.0)])
    assert check_lock(good)[0]
    overlap = LockRecord(holdings=[Holding(1, 10, 0.0, 1.0), Holding(2, 12, 0.5, 2.0)])
    ok, detail = check_lock(overlap)
    assert not ok and "still held" in detail
    assert not check_lock(LockRecord(holdings=[Holding(1, 10, 0.0, 1.0), Holding(2, 10, 1.5, 2.0)]))[0]
    assert not check_lock(LockRecord(holdings=[Holding(1, 10, 0.0, 1.0), Holding(2, 9, 1.5, 2.0)]))[0]
    fenced = LockRecord()
    fenced.fenced_write(1, 10)
    fenced.fenced_write(2, 9)
    assert fenced.accepted == 1 and not check_lock(fenced)[0]


def test_a_chaos_run_waits_for_one_already_running(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Two runs at once would tear down each other's namespaces (their names are fixed): the second waits."""
    started = threading.Event()
    monkeypatch.setattr(chaos_run, "RUN_LOCK", tmp_path / "chaos.lock")
    monkeypatch.setattr(chaos_run.netns, "available", lambda: None)
    monkeypatch.setattr(chaos_run, "_run_alone", lambda seconds, seed: started.set() or 0)
    with (tmp_path / "chaos.lock").open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a run in progress
        second = threading.Thread(target=chaos_run.run, args=(1.0, 7))
        second.start()
        assert not started.wait(0.5), "a second run started while the first held the machine"
        fcntl.flock(held, fcntl.LOCK_UN)
    assert started.wait(10), "the second run never started after the first finished"
    second.join(10)


def test_cleanup_removes_host_veths_left_behind_by_a_namespace_still_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ip netns del` only drops the name: a veth whose namespace a stray process keeps alive stays on the host,
    and the next run's `ip link add` failed with "File exists"."""
    links = "1: lo: <LOOPBACK> mtu 65536\n730: ccc-v0@if2: <BROADCAST> mtu 1500\n731: eth0: <BROADCAST> mtu 1500\n"
    calls: list[tuple[str, ...]] = []

    def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        return subprocess.CompletedProcess(list(argv), 1, stdout=links if argv[:3] == ("ip", "-o", "link") else "")

    monkeypatch.setattr(netns, "sh", sh)
    netns.destroy()
    assert ("ip", "link", "del", "ccc-v0") in calls
    assert not any(call[:3] == ("ip", "link", "del") and call[3] in ("lo", "eth0") for call in calls)
