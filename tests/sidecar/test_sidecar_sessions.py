"""Sessions and ephemeral keys over HTTP, on real node processes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from coordinated.tools.localcluster import LocalCluster, LocalNode

pytestmark = pytest.mark.timeout(180)


def error_of(status: int, body: Any, expected_status: int, error_type: str) -> str:
    assert status == expected_status and isinstance(body, dict), (status, body)
    assert body["error"]["type"] == error_type and body["status"] == expected_status, body
    return str(body["error"]["reason"])


def test_the_sessions_api(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    [node] = cluster.bootstrap(1)
    cluster.wait_master()

    status, session = node.request("POST", "/_sessions", {"ttl": "10s"})
    assert status == 201 and set(session) == {"id", "ttl", "remaining_ms"} and session["ttl"] == "10s", session
    assert session["remaining_ms"] == 10_000
    sid = session["id"]
    for body, field in (({"ttl": "10ms"}, "[ttl]"), ({"ttl": "ten"}, "[ttl]"), ({}, "[ttl]")):
        assert field in error_of(*node.request("POST", "/_sessions", body), 400, "illegal_argument_exception")
    assert "[node]" in error_of(
        *node.request("POST", "/_sessions", {"ttl": "10s", "node": node.name}), 400, "illegal_argument_exception"
    )
    status, body = node.request("POST", "/_sessions", {"ttl": "10s", "owner": "x"})
    assert status == 400 and "owner" in body["error"]["reason"], body

    status, written = node.put(f"/_cluster/metadata/locks/a?session={sid}&op_type=create", {"holder": "me"})
    assert status == 200, written
    status, key = node.get("/_cluster/metadata/locks/a")
    assert status == 200 and key["session"] == sid and key["create_version"] == written["version"], key
    status, key = node.get("/_cluster/metadata/locks/a?local=true")
    assert key["session"] == sid, key
    node.put("/_cluster/metadata/plain", 1)
    assert "session" not in node.get("/_cluster/metadata/plain")[1]
    txn = {"success": [{"op": "put", "key": "locks/b", "value": 2, "session": sid}]}
    status, result = node.request("POST", "/_cluster/metadata/_txn", txn)
    assert status == 200 and result["succeeded"], result

    status, listed = node.get("/_sessions")
    assert status == 200 and listed["sessions"] == [{"id": sid, "ttl": "10s", "keys": ["locks/a", "locks/b"]}]
    status, renewed = node.put(f"/_sessions/{sid}/_keepalive")
    remaining = renewed.pop("remaining_ms")
    assert status == 200 and renewed == {"id": sid, "ttl": "10s"} and 9_000 < remaining <= 10_000, renewed

    status, node_session = node.request("POST", "/_sessions", {"node": node.name})
    assert status == 201 and node_session["node"] == node.name, node_session
    metadata = node.get("/_cluster/state")[1]["metadata"]
    assert metadata["sessions"][sid]["ttl"] == "10s", metadata["sessions"]
    assert metadata["sessions"][node_session["id"]]["node"] == node.name, metadata["sessions"]
    assert metadata["ephemeral_keys"] == {"locks/a": sid, "locks/b": sid}, metadata["ephemeral_keys"]
    assert "not in the cluster" in error_of(
        *node.request("POST", "/_sessions", {"node": "elsewhere"}), 400, "illegal_argument_exception"
    )

    status, ended = node.request("DELETE", f"/_sessions/{sid}")
    assert status == 200 and ended == {"acknowledged": True}, ended
    assert node.get("/_cluster/metadata/locks/a")[0] == 404 and node.get("/_cluster/metadata/locks/b")[0] == 404
    assert node.get("/_cluster/metadata/plain")[0] == 200
    for method, path, body in (
        ("PUT", f"/_sessions/{sid}/_keepalive", None),
        ("DELETE", f"/_sessions/{sid}", None),
        ("PUT", f"/_cluster/metadata/locks/a?session={sid}", 1),
    ):
        reason = error_of(*node.request(method, path, body), 404, "resource_not_found_exception")
        assert f"session [{sid}]" in reason, reason
    assert "[session]" in error_of(
        *node.put("/_cluster/metadata/k?session=a%20b", 1), 400, "illegal_argument_exception"
    )

    node.put("/_cluster/metadata/plain?if_version=1", 2)  # a conflict, counted
    status, metrics = node.request("GET", "/metrics")
    text = metrics if isinstance(metrics, str) else str(metrics)
    for line in (
        "coordinated_sessions_active 1.0",
        "coordinated_sessions_created_total 2.0",
        "coordinated_sessions_ended_total 1.0",
        "coordinated_version_conflicts_total 1.0",
    ):
        assert line in text, line
    history = node.get("/_history")[1]
    assert "session_created" in str(history) and "session_ended" in str(history)


def keepalive_via_any(nodes: list[LocalNode], sid: str, stop: threading.Event, acked: list[float]) -> None:
    """Keeps the session alive through whichever node answers, as a client that follows the cluster does."""
    index = 0
    while not stop.is_set():
        node = nodes[index % len(nodes)]
        index += 1
        if not node.alive():
            continue
        try:
            status, _ = node.put(f"/_sessions/{sid}/_keepalive", timeout=2)
        except OSError:
            continue
        if status == 200:
            acked.append(time.monotonic())
            stop.wait(0.5)


def ephemeral_key_on_a_follower(
    cluster: LocalCluster, nodes: list[LocalNode], ttl: str, key: str
) -> tuple[LocalNode, LocalNode, str]:
    """(the master, a follower, a session of `ttl` created through the follower, holding the ephemeral `key`)."""
    master = cluster.wait_master()
    assert master is not None
    follower = next(node for node in nodes if node is not master)
    status, session = follower.request("POST", "/_sessions", {"ttl": ttl})
    assert status == 201, session
    sid = str(session["id"])
    assert follower.put(f"/_cluster/metadata/{key}?session={sid}", follower.name)[0] == 200
    return master, follower, sid


def test_a_session_survives_killing_the_master_and_its_key_vanishes_once_keepalives_stop(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    master, _, sid = ephemeral_key_on_a_follower(cluster, nodes, "5s", "leader")
    stop, acked = threading.Event(), []
    thread = threading.Thread(target=keepalive_via_any, args=(nodes, sid, stop, acked), daemon=True)
    thread.start()
    try:
        cluster.kill(master)
        new_master = cluster.wait_master(timeout=30, exclude=master)
        assert new_master is not None and new_master is not master
        time.sleep(7)  # longer than the TTL, with keepalives going to the new master
        status, key = new_master.get("/_cluster/metadata/leader")
        assert status == 200 and key["session"] == sid, key
        assert [s["id"] for s in new_master.get("/_sessions")[1]["sessions"]] == [sid]
    finally:
        stop.set()
        thread.join(10)
    assert acked
    # Without keepalives, the new master ends the session and deletes the key in the same state.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and new_master.get("/_cluster/metadata/leader")[0] != 404:
        time.sleep(0.25)
    assert new_master.get("/_cluster/metadata/leader")[0] == 404
    assert new_master.get("/_sessions")[1]["sessions"] == []
    events = [line for line in str(new_master.get("/_history")[1]).splitlines() if "session_expired" in line]
    assert events and sid in events[0]


def test_a_new_master_continues_an_abandoned_session_from_its_checkpoint(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    """A 10s session kept alive once, then abandoned; 7.5s later its master is killed. The next master
    continues from the checkpointed remaining TTL (about 2.5s, at most a 2s allowance more), so the key goes
    within a few seconds of the election, where a whole new TTL would have kept it for 10s."""
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    master, follower, sid = ephemeral_key_on_a_follower(cluster, nodes, "10s", "lock")
    assert follower.put(f"/_sessions/{sid}/_keepalive")[0] == 200
    time.sleep(7.5)
    status, state = follower.get("/_cluster/state?local=true")
    assert status == 200, state
    recorded = state["metadata"]["sessions"][sid]["checkpoint_remaining_ms"]
    assert 2_000 <= recorded <= 3_500, recorded  # checkpointed at most half the 2s allowance ago
    cluster.kill(master)
    new_master = cluster.wait_master(timeout=30, exclude=master)
    assert new_master is not None
    elected = time.monotonic()
    while new_master.get("/_cluster/metadata/lock")[0] != 404:
        assert time.monotonic() - elected < 7.5, "the session outlived its checkpoint by more than the allowance"
        time.sleep(0.1)
    assert new_master.get("/_sessions")[1]["sessions"] == []
