"""Rolling upgrades from the previous release (`compat/previous-release`) to this one, with real processes of both:
3 and 5 nodes, followers first and the master last, or the master first (as a StatefulSet may take them), under
writers, linearizable readers and a streaming watcher. No acknowledged write is lost, the history is
linearizable, the watcher sees every change once, and the audit of every node's history (segments of both
releases) is ok. Until the last node runs this release the cluster keeps the previous release's forms; then it
moves by itself, after which the previous release refuses its data directory naming the release to run, and
a node of the previous release is kept out by the version barrier."""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

import pytest
from mixed import Mixed, Workload, audit_ok, history_dirs, previous_release_refuses

from coordinated.coordination.wire_versions import CURRENT
from coordinated.release import installed_release
from coordinated.tools.previous_release import PreviousRelease

pytestmark = pytest.mark.timeout(600)


def rolling_upgrade(mixed: Mixed, order: str) -> list[bool]:
    """Every node restarted on this release, one at a time; whether the cluster had moved after each."""
    moved_after = []
    count = len(mixed.nodes())
    for _ in range(count):
        master = mixed.master()
        old = [node for node in mixed.nodes() if mixed.runs_old(node)]
        followers = [node for node in old if node is not master]
        target = master if (order == "master_first" and master in old) or not followers else followers[0]
        mixed.upgrade(target)
        master = mixed.wait_joined(count)
        time.sleep(1)  # a few follower checks: the master learns the node's version
        features = mixed.health(master).get("features") or {}
        moved_after.append(bool(features) and all(features.values()))
    return moved_after


@pytest.mark.parametrize(
    ("size", "order"), [(3, "followers_first"), (3, "master_first"), (5, "master_first"), (5, "followers_first")]
)
def test_a_rolling_upgrade_under_writes_and_a_streaming_watch_loses_nothing(
    previous_release: PreviousRelease, tmp_path: Path, size: int, order: str
) -> None:
    mixed = Mixed(tmp_path / "cluster", previous_release)
    t = [time.monotonic()]
    try:
        mixed.bootstrap_old(size)
        t.append(time.monotonic())
        workload = Workload(mixed.nodes(), seed=size).start()
        time.sleep(1)
        moved_after = rolling_upgrade(mixed, order)
        t.append(time.monotonic())
        time.sleep(1)
        workload.stop()
        t.append(time.monotonic())
        master = mixed.master()
        health = mixed.wait_moved(master)
        for node in mixed.nodes():
            mixed.cluster.stop(node, timeout=30)
        t.append(time.monotonic())
    finally:
        mixed.stop_all()
    workload.check()
    t.append(time.monotonic())
    assert moved_after == [False] * (size - 1) + [True], moved_after
    assert health["cluster_version"] == {"number": installed_release(), "wire_version": CURRENT}
    audit_ok(history_dirs(mixed), tmp_path / "report")
    t.append(time.monotonic())
    print(order, size, workload.summary(), "killed", mixed.killed, [round(b - a, 1) for a, b in itertools.pairwise(t)])


def test_once_every_node_runs_this_release_the_previous_one_refuses_its_data_and_cannot_join(
    previous_release: PreviousRelease, tmp_path: Path
) -> None:
    mixed = Mixed(tmp_path / "cluster", previous_release)
    try:
        nodes = mixed.bootstrap_old(3)
        assert nodes[0].put("/_cluster/metadata/a", {"x": 1})[0] == 200
        for node in nodes:
            mixed.upgrade(node)
            mixed.wait_joined(3)
        master = mixed.master()
        mixed.wait_moved(master)
        assert master.put("/_cluster/metadata/b", {"x": 2})[0] == 200
        # A rollback of a node of the moved cluster: the previous release refuses its data directory.
        follower = next(node for node in nodes if node is not master)
        mixed.cluster.stop(follower, timeout=30)
        code, err = previous_release_refuses(previous_release, follower)
        assert code == 3, err
        assert (
            f"unknown format [4 (written by coordinated {installed_release()}; release 0.2.0 or later reads it: these files are intact, do not wipe them)]"
            in err
        ), err
        mixed.cluster.start(follower.name, python=sys.executable)  # and this release still reads it
        mixed.cluster.wait_http(follower)
        mixed.wait_joined(3)
        # A fresh node of the previous release: the version barrier keeps it out, naming both releases.
        mixed.cluster.seed_names = [node.name for node in nodes]
        newcomer = mixed.cluster.start("node-9", python=mixed.old_python)
        mixed.cluster.wait_http(newcomer)
        expected = (
            f"node [node-9] runs release {previous_release.release} (wire version 1), but every node of this cluster "
            f"runs {installed_release()} or later"
        )
        deadline = time.monotonic() + 30
        while expected not in str(mixed.health(newcomer).get("formation_problem")) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert expected in str(mixed.health(newcomer).get("formation_problem")), mixed.health(newcomer)
        assert mixed.health(master)["number_of_nodes"] == 3
    finally:
        mixed.stop_all()
