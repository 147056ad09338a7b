"""No dynamic setting can take a cluster down: on a 3-node cluster of real processes, every dynamic setting is set
to each end of its range through the API, the cluster commits a write, and the setting is reset; then, with all of
them at their minimum at once, the master is killed and its successor still commits a write and the reset."""

from __future__ import annotations

import time
from collections.abc import Callable

from coordinated.sidecar.node_settings import sidecar_registry
from coordinated.tools.localcluster import LocalCluster, LocalNode

DYNAMIC = [setting for setting in sidecar_registry().settings.values() if setting.dynamic]


def _persistent(node: LocalNode) -> dict[str, str]:
    status, body = node.get("/_cluster/settings")
    assert status == 200, body
    persistent: dict[str, str] = body["persistent"]
    return persistent


def _applied_everywhere(nodes: list[LocalNode], expected: dict[str, str], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(_persistent(node) == expected for node in nodes):
            return
        time.sleep(0.05)
    raise AssertionError(f"not every node applied {expected}: {[_persistent(node) for node in nodes]}")


def _update(node: LocalNode, changes: dict[str, str | None]) -> None:
    status, body = node.put("/_cluster/settings", {"persistent": changes})
    assert status == 200, (changes, body)


def _commits_a_write(node: LocalNode, value: int) -> None:
    status, body = node.put("/_cluster/metadata/probe", value)
    assert status == 200, body


def test_every_dynamic_setting_at_its_bounds_leaves_a_cluster_that_commits_and_resets_it(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    assert {setting.name for setting in DYNAMIC} >= {"cluster.no_master_block", "cluster.metadata.max_state_size"}
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    writes = 0
    for index, setting in enumerate(DYNAMIC):
        extremes = setting.value_type.extremes()
        assert extremes, f"[{setting.name}] is dynamic but has no bounds to test"
        for value in extremes:
            through = nodes[(index + writes) % 3]  # followers forward to the master too
            _update(through, {setting.name: value})
            _applied_everywhere(nodes, {setting.name: value})
            writes += 1
            _commits_a_write(nodes[writes % 3], writes)
        _update(nodes[index % 3], {setting.name: None})
        _applied_everywhere(nodes, {})

    lowest = {setting.name: setting.value_type.extremes()[0] for setting in DYNAMIC}
    _update(nodes[0], lowest)
    _applied_everywhere(nodes, lowest)
    master = cluster.wait_master(nodes=3)
    cluster.kill(master)
    survivors = [node for node in nodes if node is not master]
    successor = cluster.wait_master(exclude=master)
    _commits_a_write(survivors[0], writes + 1)
    _update(successor, dict.fromkeys(lowest))
    _applied_everywhere(survivors, {})
    cluster.start(master.name)
    cluster.wait_master(nodes=3)
    _applied_everywhere(nodes, {})
    _commits_a_write(master, writes + 2)
