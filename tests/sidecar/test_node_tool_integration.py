"""`coordinated node-tool` on real node processes. Quorum loss for good: two of three data directories are gone,
the survivor is unsafe-bootstrapped, and the cluster grows back; a node of the old cluster joins the new one only
after detach-cluster. A wrong persisted setting: removed from every stopped node without a master."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from coordinated.coordination.offline_recovery import UNSAFE_BOOTSTRAP_SETTING
from coordinated.tools.localcluster import LocalCluster, LocalNode

pytestmark = pytest.mark.timeout(180)
KEYS = {f"key-{i}": {"n": i} for i in range(8)}


def node_tool(action: str, node: LocalNode, *settings: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "coordinated.cli", "node-tool", action, "--data-dir", str(node.data_dir), "--yes"]
    argv += settings
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)


def cluster_with_keys(cluster: LocalCluster) -> tuple[list[LocalNode], str]:
    """Three nodes holding KEYS, all applied everywhere; then every process is killed with SIGKILL."""
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master(nodes=3)
    version = 0
    for key, value in KEYS.items():
        status, body = master.put(f"/_cluster/metadata/{key}", value)
        assert status == 200, body
        version = body["version"]
    for node in nodes:
        status, state = node.get(f"/_cluster/state?local=true&wait_for_version={version}&wait_for_timeout=10s")
        assert status == 200 and state["wait_for_timed_out"] is False
    old_uuid = state["metadata"]["cluster_uuid"]
    for node in nodes:
        cluster.kill(node)
    return nodes, old_uuid


def local_state(node: LocalNode) -> dict[str, Any]:
    status, state = node.get("/_cluster/state?local=true")
    assert status == 200
    return state  # type: ignore[no-any-return]


def wait_voters(cluster: LocalCluster, master: LocalNode, size: int) -> dict[str, list[str]]:
    deadline = time.monotonic() + 30
    config = cluster.voting_config(master)
    while time.monotonic() < deadline:
        config = cluster.voting_config(master)
        if len(config["committed"]) == size and config["committed"] == config["accepted"]:
            return config
        time.sleep(0.1)
    pytest.fail(f"the voting configuration did not reach {size} nodes: {config}")


def test_unsafe_bootstrap_of_the_survivor_then_two_new_nodes(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    nodes, old_uuid = cluster_with_keys(cluster)
    survivor, lost = nodes[0], nodes[1:]
    for node in lost:
        shutil.rmtree(node.data_dir)  # gone for good

    # The survivor alone cannot elect itself: it needs two of three votes.
    result = node_tool("unsafe-bootstrap", survivor)
    assert result.returncode == 0, result.stderr
    assert "(term, version) = (" in result.stdout

    cluster.wait_http(cluster.start(survivor.name))
    master = cluster.wait_master(timeout=30, nodes=1)
    assert master is survivor
    state = local_state(survivor)
    new_uuid = state["metadata"]["cluster_uuid"]
    assert new_uuid != old_uuid
    for key, value in KEYS.items():
        status, body = survivor.get(f"/_cluster/metadata/{key}")
        assert status == 200 and body["value"] == value, (key, body)
    _, settings = survivor.get("/_cluster/settings")
    assert settings["persistent"][UNSAFE_BOOTSTRAP_SETTING] == "true"

    for node in lost:  # new, empty nodes with the survivor as a seed
        cluster.wait_http(cluster.start(node.name))
    master = cluster.wait_master(timeout=30, nodes=3)
    config = wait_voters(cluster, master, 3)
    assert sorted(config["committed"]) == sorted(node.name for node in nodes)
    assert master.put("/_cluster/metadata/after-recovery", 1)[0] == 200
    for node in lost:
        assert local_state(node)["metadata"]["cluster_uuid"] == new_uuid

    _, text = survivor.get("/_history?after_seq=0")
    events = [json.loads(line) for line in text.splitlines() if line]
    marks = [i for i, event in enumerate(events) if event["type"] == "unsafe_bootstrap"]
    assert len(marks) == 1
    before, after = events[: marks[0]], events[marks[0] + 1 :]
    states_before = [event for event in before if event.get("version") is not None]
    assert {event["cluster_uuid"] for event in states_before if event["type"] != "accepted"} == {old_uuid}
    # Another cluster's state only as a bootstrap that lost the race: its own first state, accepted, never
    # committed (the survivor won term 1 but the cluster formed in a later term, under another UUID).
    other = [event for event in states_before if event["cluster_uuid"] != old_uuid]
    assert all(event["type"] == "accepted" and event["version"] == 1 for event in other), other
    assert events[marks[0]]["cluster_uuid"] == new_uuid
    assert {event["cluster_uuid"] for event in after if event.get("version") is not None} == {new_uuid}


def test_an_old_node_joins_the_new_cluster_only_after_detach(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    nodes, old_uuid = cluster_with_keys(cluster)
    survivor, old_member, lost = nodes
    shutil.rmtree(lost.data_dir)
    result = node_tool("unsafe-bootstrap", survivor)
    assert result.returncode == 0, result.stderr
    cluster.wait_http(cluster.start(survivor.name))
    cluster.wait_master(timeout=30, nodes=1)
    new_uuid = local_state(survivor)["metadata"]["cluster_uuid"]

    # Undetached, the old member still belongs to the old cluster: it ignores the new master as a foreign one.
    cluster.wait_http(cluster.start(old_member.name))
    assert old_member.log_path is not None
    foreign = f"peer {survivor.transport_address} belongs to cluster [{new_uuid}]"
    deadline = time.monotonic() + 30
    while foreign not in old_member.log_path.read_text():
        assert time.monotonic() < deadline, "the old member never noticed the new cluster"
        time.sleep(0.2)
    assert local_state(old_member)["metadata"]["cluster_uuid"] == old_uuid
    assert cluster.stop(old_member) == 0

    result = node_tool("detach-cluster", old_member)
    assert result.returncode == 0, result.stderr
    cluster.wait_http(cluster.start(old_member.name))
    master = cluster.wait_master(timeout=30, nodes=2)
    assert master is survivor
    state = local_state(old_member)
    assert state["metadata"]["cluster_uuid"] == new_uuid
    for key, value in KEYS.items():
        status, body = old_member.get(f"/_cluster/metadata/{key}?local=true")
        assert status == 200 and body["value"] == value, (key, body)


def test_remove_settings_on_every_stopped_node_without_a_master(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    wrong = {"cluster.no_master_block": "all", "cluster.metadata.max_value_size": "64b"}
    status, body = nodes[0].put("/_cluster/settings", {"persistent": wrong})
    assert status == 200, body
    assert nodes[1].put("/_cluster/metadata/kept", {"n": 1})[0] == 200
    assert nodes[2].put("/_cluster/metadata/large", "x" * 100)[0] == 400  # what the operator wants gone
    for node in nodes:
        status, state = node.get("/_cluster/state?local=true&wait_for_version=3&wait_for_timeout=10s")
        assert status == 200 and dict(state["metadata"]["persistent_settings"]) == wrong
    for node in nodes:
        assert cluster.stop(node) == 0

    refused = node_tool("remove-settings", nodes[0], "no.such.*")
    assert refused.returncode == 3 and "no persistent setting" in refused.stderr, refused
    for node in nodes:
        result = node_tool("remove-settings", node, "cluster.no_master_block", "cluster.metadata.*")
        assert result.returncode == 0, result.stderr
        assert "cluster.metadata.max_value_size: 64b" in result.stdout and "[settings_removed]" in result.stdout

    for node in nodes:
        cluster.start(node.name)
    for node in nodes:
        cluster.wait_http(node)
    master = cluster.wait_master(timeout=30, nodes=3)
    status, written = master.put("/_cluster/metadata/large", "x" * 100)
    assert status == 200, written
    for node in nodes:
        query = f"local=true&wait_for_version={written['version']}&wait_for_timeout=10s"
        status, state = node.get(f"/_cluster/state?{query}")
        assert status == 200 and state["metadata"]["persistent_settings"] == {}
        assert node.get("/_cluster/metadata/kept?local=true")[1]["value"] == {"n": 1}
        _, text = node.get("/_history?after_seq=0")
        removed = [json.loads(line) for line in text.splitlines() if '"settings_removed"' in line]
        assert [event["settings"] for event in removed] == [
            ["cluster.metadata.max_value_size", "cluster.no_master_block"]
        ]
