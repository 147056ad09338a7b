"""Real node processes on loopback with short fault-detection settings."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from coordinated.tools.localcluster import FAST_SETTINGS, LocalCluster, LocalNode, http

pytestmark = pytest.mark.timeout(120)


def history(node: LocalNode, after: int = 0) -> list[dict[str, Any]]:
    _, text = node.get(f"/_history?after_seq={after}")
    if isinstance(text, dict):  # a single line decodes as one JSON object
        return [text]
    return [json.loads(line) for line in text.splitlines() if line]


def test_election_writes_and_reads_through_any_node(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master()
    status, cat = master.get("/_cat/master?format=json")
    assert status == 200 and cat[0]["node"] == master.name
    elected = [e for n in nodes for e in history(n) if e["type"] == "elected"]
    last_term = max(e["term"] for e in elected)
    assert {e["node"] for e in elected if e["term"] == last_term} == {master.node_id()}
    versions = []
    for i, node in enumerate(nodes):
        status, body = node.put(f"/_cluster/metadata/key{i}", {"written_via": node.name, "n": i})
        assert status == 200, body
        assert body["key"] == f"key{i}"
        versions.append(body["version"])
    assert versions == sorted(versions)
    for node in nodes:
        for i in range(3):
            status, body = node.get(f"/_cluster/metadata/key{i}")
            assert status == 200 and body["value"] == {"written_via": f"node-{i + 1}", "n": i}
        status, _ = node.get("/_cluster/metadata/missing")
        assert status == 404
        # A follower's applied state catches up; the long-poll returns once it has.
        status, state = node.get(f"/_cluster/state?local=true&wait_for_version={versions[-1]}&wait_for_timeout=5s")
        assert status == 200 and state["wait_for_timed_out"] is False
        assert set(state["metadata"]["kv"]) >= {"key0", "key1", "key2"}
    status, body = nodes[1].request("DELETE", "/_cluster/metadata/key0")
    assert status == 200
    assert nodes[2].get("/_cluster/metadata/key0")[0] == 404
    # History seq is gap-free per node.
    for node in nodes:
        seqs = [e["seq"] for e in history(node)]
        assert seqs == list(range(1, len(seqs) + 1))
    status, body = nodes[0].get("/_cluster/state?wait_for_version=100000&wait_for_timeout=200ms")
    assert status == 200 and body["wait_for_timed_out"] is True


def test_kill_master_loses_no_acknowledged_write(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master()
    acked: dict[str, int] = {}
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            for node in nodes:
                if stop.is_set() or not node.alive():
                    continue
                try:
                    status, _ = node.put(f"/_cluster/metadata/w{i}", i, timeout=3)
                except OSError:
                    continue
                if status == 200:
                    acked[f"w{i}"] = i
                i += 1

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    time.sleep(1.0)
    cluster.kill(master)
    new_master = cluster.wait_master(timeout=20, exclude=master)
    assert new_master is not master
    time.sleep(1.0)
    stop.set()
    thread.join(10)
    assert len(acked) > 5
    _, state = new_master.get("/_cluster/state")
    missing = [key for key in acked if key not in state["metadata"]["kv"]]
    assert not missing, f"acknowledged writes lost: {missing}"
    # The killed master rejoins with its data.
    cluster.start(master.name)
    cluster.wait_http(master)
    cluster.wait_master(timeout=20, nodes=3)


def test_a_non_local_state_read_on_a_lagging_follower_includes_acknowledged_writes(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    """GET /_cluster/state (not ?local) reads the master's state: a follower that missed the latest publication
    (it was paused) must not serve its stale state, even though it knows the master."""
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master()
    lagging = next(node for node in nodes if node is not master)
    cluster.kill(lagging, signal.SIGSTOP)
    try:
        assert master.put("/_cluster/metadata/fresh", {"v": 1})[0] == 200  # acknowledged without `lagging`
        read: dict[str, Any] = {}

        def read_state() -> None:
            read["status"], read["body"] = lagging.get("/_cluster/state")

        reader = threading.Thread(target=read_state)
        reader.start()  # sits in the paused node's socket, beside the publication it missed
        time.sleep(0.2)
    finally:
        cluster.kill(lagging, signal.SIGCONT)
    reader.join(timeout=15)
    assert read.get("status") == 200, read
    assert read["body"]["metadata"]["kv"].get("fresh") == {"v": 1}
    _, local = lagging.get("/_cluster/state?local=true")
    assert local["version"] >= read["body"]["version"]


def test_sigstop_master_is_detected(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    cluster.bootstrap(3)
    master = cluster.wait_master()
    cluster.kill(master, signal.SIGSTOP)
    try:
        started = time.monotonic()
        new_master = cluster.wait_master(timeout=20, exclude=master)
        assert new_master is not master
        assert time.monotonic() - started < 15
    finally:
        cluster.kill(master, signal.SIGCONT)
    # The old master learns of the newer term and follows whichever master the cluster has by then.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        current = cluster.master()
        _, health = master.get("/_cluster/health")
        if current is not None and current is not master and health.get("mode") == "FOLLOWER":
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"old master did not rejoin as a follower: {health}")


def test_restart_rejoins_with_the_diff_it_missed_then_diffs(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master()
    big = "x" * 100_000
    assert master.put("/_cluster/metadata/big", big)[0] == 200
    follower = next(n for n in nodes if n is not master)
    node_id = follower.node_id()
    assert cluster.stop(follower) == 0
    cluster.wait_master(timeout=20, nodes=2)
    assert master.put("/_cluster/metadata/while-away", 1)[0] == 200
    sent_before = sent_bytes(master, follower)
    cluster.start(follower.name)
    cluster.wait_http(follower)
    cluster.wait_master(timeout=20, nodes=3)
    assert follower.node_id() == node_id  # same disk, same node
    _, state = follower.get("/_cluster/state?local=true")
    assert state["metadata"]["kv"]["while-away"] == 1 and state["metadata"]["kv"]["big"] == big
    missed = sent_bytes(master, follower) - sent_before
    assert missed < 50_000, "a rejoining node is sent the diff it missed, not the 100 KB value it holds"
    # From now on its base matches: a one-key write goes as a diff.
    before = sent_bytes(master, follower)
    status, body = master.put("/_cluster/metadata/small", 1)
    assert status == 200
    assert follower.get(f"/_cluster/state?local=true&wait_for_version={body['version']}&wait_for_timeout=5s")[0] == 200
    assert sent_bytes(master, follower) - before < 10_000


def sent_bytes(master: LocalNode, to: LocalNode) -> int:
    _, text = master.get("/metrics")
    for line in text.splitlines():
        # Labelled by the peer's node name, never its address (an IP that changes with every pod restart).
        if line.startswith(f'coordinated_transport_sent_bytes_total{{peer="{to.name}"}}'):
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def test_wiped_node_rejoins_as_new_node(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master()
    follower = next(n for n in nodes if n is not master)
    old_id = follower.node_id()
    cluster.stop(follower)
    import shutil

    shutil.rmtree(follower.data_dir)
    cluster.start(follower.name)
    cluster.wait_http(follower)
    master = cluster.wait_master(timeout=20, nodes=3)
    assert follower.node_id() != old_id
    _, state = master.get("/_cluster/state")
    assert follower.node_id() in state["nodes"] and old_id not in state["nodes"]


def test_scaling_1_3_5_3_with_exclusions(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    n1 = cluster.add("node-1")
    cluster.seed_names = ["node-1", "node-2"]
    cluster.add("node-2")
    # node-2's seed is not running yet. That failed probe is also what lets a lone node bootstrap: the core
    # re-checks bootstrap only when a probe answers or fails (reported to the core's author).
    cluster.start("node-1", initial_master_nodes=["node-1"])
    cluster.wait_http(n1)
    cluster.wait_master(nodes=1)
    assert cluster.voting_config(n1)["committed"] == ["node-1"]
    for name in ("node-2", "node-3"):
        cluster.wait_http(cluster.start(name))
    master = cluster.wait_master(timeout=20, nodes=3)
    wait_config(cluster, master, 3)
    for name in ("node-4", "node-5"):
        cluster.wait_http(cluster.start(name))
    master = cluster.wait_master(timeout=20, nodes=5)
    wait_config(cluster, master, 5)
    leaving = [n for n in ("node-4", "node-5")]
    status, body = master.request(
        "POST", f"/_cluster/voting_config_exclusions?node_names={','.join(leaving)}&timeout=20s"
    )
    assert status == 200, body
    master = cluster.wait_master(timeout=20)
    config = cluster.voting_config(master)
    assert not set(config["committed"]) & set(leaving), config
    for name in leaving:
        assert cluster.stop(cluster.nodes[name]) == 0
    status, body = master.request("DELETE", "/_cluster/voting_config_exclusions?wait_for_removal=true&timeout=20s")
    assert status == 200, body
    master = cluster.wait_master(timeout=20, nodes=3)
    config = cluster.voting_config(master)
    assert len(config["committed"]) == 3 and config["exclusions"] == []
    assert master.put("/_cluster/metadata/after-scaling", True)[0] == 200


def wait_config(cluster: LocalCluster, master: LocalNode, size: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        config = cluster.voting_config(master)
        if len(config["committed"]) == size and config["committed"] == config["accepted"]:
            return
        time.sleep(0.1)
    pytest.fail(f"voting config did not reach {size}: {config}")


def test_no_master_block(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master()
    status, body = master.put("/_cluster/metadata/k", "v")
    assert status == 200
    survivor = next(n for n in nodes if n is not master)
    # An ack means applied on the master; followers apply just after it.
    assert survivor.get(f"/_cluster/state?local=true&wait_for_version={body['version']}&wait_for_timeout=5s")[0] == 200
    for node in nodes:
        if node is not survivor:
            cluster.kill(node)
    deadline = time.monotonic() + 20
    while survivor.get("/_cluster/health")[1]["master_node"] is not None:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    status, body = survivor.put("/_cluster/metadata/k2", "v2")
    assert status == 503 and body["error"]["type"] == "cluster_block_exception"
    status, body = survivor.get("/_cluster/metadata/k?local=true")
    assert status == 200 and body["value"] == "v"  # reads still served under the default `write` block
    assert survivor.get("/readyz")[0] == 503
    deadline = time.monotonic() + 10
    while True:
        status, health = survivor.get("/_cluster/health")
        if "quorum" in (health["formation_problem"] or "") or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert health["status"] == "red" and "quorum" in health["formation_problem"], health
    assert survivor.get("/_cluster/state")[0] == 503
    assert survivor.get("/_cluster/state?local=true")[0] == 200


def test_bad_input_is_refused_without_changes(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(settings={**cluster_settings(), "http.max_content_length": "10kb"})
    nodes = cluster.bootstrap(3)
    node = nodes[0]
    _, before = node.get("/_cluster/state")
    cases: list[tuple[str, str, bytes | None, int, str]] = [
        ("PUT", "/_cluster/metadata/k", b"{not json", 400, "malformed JSON"),
        ("PUT", "/_cluster/metadata/k", b"", 400, "body is required"),
        ("PUT", "/_cluster/metadata/k", b'"' + b"x" * 20_000 + b'"', 413, "too large"),
        ("PUT", "/_cluster/metadata/k?timeout=soon", b"1", 400, "timeout"),
        ("PUT", "/_cluster/metadata/k?bogus=1", b"1", 400, "unrecognized parameter"),
        ("PUT", "/_cluster/settings", b'{"transient": {}}', 400, "transient"),
        ("PUT", "/_cluster/settings", b'{"persistent": {"no.such": "1"}}', 400, "unknown setting [no.such]"),
        (
            "PUT",
            "/_cluster/settings",
            b'{"persistent": {"cluster.no_master_block": "x"}}',
            400,
            "cluster.no_master_block",
        ),
        (
            "PUT",
            "/_cluster/settings",
            b'{"persistent": {"cluster.publish.timeout": "1ms"}}',
            400,
            "[cluster.publish.timeout] is not dynamically updateable: it is a node setting",
        ),
        (
            "PUT",
            "/_cluster/settings",
            b'{"persistent": {"cluster.metadata.max_state_size": "99999999999999999999d"}}',
            400,
            "[cluster.metadata.max_state_size]",
        ),
        ("PUT", "/_cluster/settings", b'{"persistent": {"node.name": "x"}}', 400, "not dynamically updateable"),
        ("PUT", "/_cluster/settings", b'{"persistent": []}', 400, "persistent"),
        ("PUT", "/_cluster/settings", b"[" * 100_00, 400, "JSON"),
        ("POST", "/_cluster/voting_config_exclusions", None, 400, "node_names"),
        ("POST", "/_cluster/voting_config_exclusions?node_names=a&node_ids=b", None, 400, "not both"),
        ("POST", "/_cluster/voting_config_exclusions?node_names=bad!name", None, 400, "node name"),
        ("DELETE", "/_cluster/voting_config_exclusions?wait_for_removal=maybe", None, 400, "wait_for_removal"),
        ("GET", "/_cluster/state?wait_for_version=-1", None, 400, "wait_for_version"),
        ("GET", "/_cluster/health?wait_for_nodes=lots", None, 400, "wait_for_nodes"),
        ("GET", "/_history?after_seq=abc", None, 400, "after_seq"),
        ("PUT", "/_hooks/h", b'{"url": "http://example.com/x"}', 400, "loopback"),
        ("PUT", "/_hooks/h", b'{"url": "http://127.0.0.1:1/x", "extra": 1}', 400, "extra"),
        ("GET", "/_nope", None, 404, "no handler"),
    ]
    for method, path, body, status, needle in cases:
        got, answer = http(method, node.url + path, raw=body if body is not None else None)
        assert got == status, (method, path, answer)
        assert needle.lower() in json.dumps(answer).lower(), (path, answer)
        assert answer["status"] == status and answer["error"]["type"]
    too_many = ",".join(f"n{i}" for i in range(11))
    got, answer = node.request("POST", f"/_cluster/voting_config_exclusions?node_names={too_many}")
    assert got == 400 and "cluster.max_voting_config_exclusions" in answer["error"]["reason"]
    _, after = node.get("/_cluster/state")
    assert after["version"] == before["version"] and after["metadata"]["kv"] == before["metadata"]["kv"]
    assert node.get("/healthz")[0] == 200
    status, ok = node.put("/_cluster/settings", {"persistent": {"cluster": {"no_master_block": "all"}}})
    assert status == 200 and ok["persistent"] == {"cluster.no_master_block": "all"}


def cluster_settings() -> dict[str, str]:
    from coordinated.tools.localcluster import FAST_SETTINGS

    return dict(FAST_SETTINGS)


def test_transport_auth(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("a-cluster-secret-of-enough-length\n")
    cluster = make_cluster(settings={**cluster_settings(), "transport.secret_file": str(secret)})
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master()
    _, before = master.get("/_cluster/state")
    envelope = {
        "sender": "127.0.0.1:1",
        "message": {
            "type": "start_join",
            "candidate": {"id": "x", "name": "x", "transport_address": "127.0.0.1:1"},
            "term": 10_000,
        },
    }
    url = f"http://{nodes[1].transport_address}/_transport/message"
    status, _ = http("POST", url, envelope)
    assert status == 401
    status, _ = http("POST", url, raw=b"{}")
    assert status == 401
    time.sleep(0.5)
    _, after = master.get("/_cluster/state")
    assert after["term"] == before["term"]


def start_node_in_foreground(victim: LocalNode) -> subprocess.CompletedProcess[str]:
    """Start a stopped node's process with its data dir; for nodes that must refuse to start."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "coordinated.cli",
            "node",
            "--name",
            victim.name,
            "--data-dir",
            str(victim.data_dir),
            "--http-port",
            str(victim.http_port),
            "--transport-port",
            str(victim.transport_port),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )


DB_FILE = "coordination-state.db"


def test_corrupt_state_file_refuses_start(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master()
    for index in range(50):
        assert master.put(f"/_cluster/metadata/k{index}", {"v": "x" * 200})[0] == 200
    victim = next(node for node in nodes if node is not master)
    cluster.stop(victim)  # a clean stop checkpoints the WAL into the database file
    db = victim.data_dir / DB_FILE
    data = bytearray(db.read_bytes())
    page = data.index(b"x" * 200) // 4096  # a page of key rows
    data[page * 4096 : page * 4096 + 64] = bytes(64)
    db.write_bytes(bytes(data))
    process = start_node_in_foreground(victim)
    assert process.returncode == 3
    assert f"[{db}] is corrupt" in process.stderr and "refusing to reset" in process.stderr
    assert "Traceback" not in process.stderr


@pytest.mark.parametrize("lost", ["wal", "database"])
def test_a_lost_acknowledged_write_refuses_start(make_cluster: Callable[..., LocalCluster], lost: str) -> None:
    """A follower killed with its last commits only in the WAL: losing that WAL (or the whole database) would
    roll it back past what it acknowledged, which its history shows, so it refuses to start and says why."""
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master()
    for index in range(3):
        assert master.put(f"/_cluster/metadata/k{index}", {"v": index})[0] == 200
    victim = next(node for node in nodes if node is not master)
    cluster.kill(victim)
    db = victim.data_dir / DB_FILE
    wal = victim.data_dir / (DB_FILE + "-wal")
    assert wal.stat().st_size > 0
    (wal if lost == "wal" else db).unlink()
    process = start_node_in_foreground(victim)
    assert process.returncode == 3, process.stderr
    assert str(db) in process.stderr and "Traceback" not in process.stderr
    expected = "acknowledged write was lost" if lost == "wal" else "refusing to reset"
    assert expected in process.stderr


def test_wrong_cluster_uuid_is_rejected(make_cluster: Callable[..., LocalCluster]) -> None:
    one = make_cluster()
    one.bootstrap(2)
    other = make_cluster()
    stranger = other.bootstrap(2)[0]
    _, theirs = stranger.get("/_cluster/state")
    _, ours = one.nodes["node-1"].get("/_cluster/state")
    assert theirs["cluster_uuid"] != ours["cluster_uuid"]
    # A node of the second cluster restarts with the first cluster's nodes as its only seeds.
    other.stop(stranger)
    seeds = ",".join(node.transport_address for node in one.nodes.values())
    other.start(stranger.name, extra={"discovery.seed_hosts": seeds})
    other.wait_http(stranger)
    time.sleep(3)
    deadline = time.monotonic() + 15
    status, state = one.nodes["node-1"].get("/_cluster/state")
    while status != 200 and time.monotonic() < deadline:  # see the report: foreign terms can churn elections
        time.sleep(0.2)
        status, state = one.nodes["node-1"].get("/_cluster/state")
    assert status == 200, state
    assert stranger.node_id() not in state["nodes"]
    _, local = stranger.get("/_cluster/state?local=true")
    # It may find its own cluster again (its old peer still seeds it), never the other one.
    assert local["cluster_uuid"] == theirs["cluster_uuid"]
    assert local["master_node"] is None or local["master_node"] not in state["nodes"]
    assert all(e["cluster_uuid"] != ours["cluster_uuid"] for e in history(stranger))


def test_the_master_removes_a_dead_follower_at_once_but_waits_for_a_hung_one(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    # Elasticsearch's default fault detection: a follower is removed after 3 failed checks, 1 s apart with a
    # 10 s timeout. A killed process closes its connections, and the master removes it as disconnected; a
    # stopped process keeps them open, so the master's connection watch must not remove it: only the checks.
    cluster = make_cluster(settings={"discovery.find_peers_interval": "200ms"})
    cluster.bootstrap(3)
    master = cluster.wait_master(timeout=30)
    dead, hung = [node for node in cluster.running() if node is not master]

    def members() -> set[str]:
        _, state = master.get("/_cluster/state?local=true")
        return {info["name"] for info in state["nodes"].values()}

    cluster.kill(dead)
    deadline = time.monotonic() + 60
    while dead.name in members() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert master.log_path is not None
    assert f"removing {dead.name} from the cluster: disconnected" in master.log_path.read_text()

    cluster.kill(hung, signal.SIGSTOP)
    try:
        time.sleep(3)
        assert hung.name in members(), "a hung follower was removed before its checks failed"
    finally:
        cluster.kill(hung, signal.SIGCONT)


def test_the_master_reports_each_followers_lag_by_name(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master()
    for i in range(20):
        assert master.put(f"/_cluster/metadata/lag-{i}", i)[0] == 200
    followers = [node for node in nodes if node is not master]

    def lag() -> dict[str, float]:
        _, text = master.get("/metrics")
        found = re.findall(r'^coordinated_follower_lag_versions\{peer="([^"]+)"\} (\S+)$', text, re.M)
        return {peer: float(value) for peer, value in found}

    # Both followers by name, and none behind once they have applied the last write (no pod IP, no skew).
    deadline = time.monotonic() + 10
    while lag() != {node.name: 0.0 for node in followers} and time.monotonic() < deadline:
        time.sleep(0.1)
    assert lag() == {node.name: 0.0 for node in followers}
    for follower in followers:  # only the master knows what its followers applied
        _, text = follower.get("/metrics")
        assert "coordinated_follower_lag_versions{" not in text


def test_the_master_reports_the_state_size_against_its_limit(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(settings={**FAST_SETTINGS, "cluster.metadata.max_state_size": "1mb"})
    nodes = cluster.bootstrap(2)
    master = cluster.wait_master()
    values = {"a": {"n": 1}, "bb": "x" * 100, "ccc": [1, 2, 3]}
    for key, value in values.items():
        assert master.put(f"/_cluster/metadata/{key}", value)[0] == 200
    expected = sum(len(key.encode()) + len(msgspec.json.encode(value)) for key, value in values.items())

    def gauges(node: LocalNode) -> dict[str, float]:
        _, text = node.get("/metrics")
        return {
            name: float(value)
            for name, value in re.findall(r"^(coordinated_cluster_state_(?:max_)?bytes) (\S+)$", text, re.M)
        }

    assert gauges(master) == {
        "coordinated_cluster_state_bytes": expected,
        "coordinated_cluster_state_max_bytes": 1 << 20,
    }
    (follower,) = [node for node in nodes if node is not master]
    assert gauges(follower) == {"coordinated_cluster_state_max_bytes": 1 << 20}, "only the master knows the size"
