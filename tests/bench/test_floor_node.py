"""The write-path floor (bench/harness/floor_node.py) is an anchor only if it does the durable work it stands for:
every write reaches the leader's and the followers' SQLite, written through the leader or forwarded by a
follower, with and without the apply round, over WebSocket streams and over plain TCP ones."""

from __future__ import annotations

import json
import sqlite3
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from child_processes import ChildProcesses

from coordinated.tools.localcluster import free_ports

NODE = Path(__file__).resolve().parents[2] / "bench" / "harness" / "floor_node.py"


def call(method: str, url: str, body: object = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=data, method=method), timeout=5) as response:
        return json.loads(response.read())


def rows(db: Path) -> dict[str, object]:
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        return {k: json.loads(v) for k, v in conn.execute("SELECT k, v FROM kv")}


@pytest.mark.parametrize(("apply_round", "raw_peers"), [(False, False), (True, False), (True, True)])
def test_every_write_is_durable_on_every_node(
    tmp_path: Path, apply_round: bool, raw_peers: bool, processes: ChildProcesses
) -> None:
    *ports, peer_port = free_ports(4)
    argv = [sys.executable, str(NODE), "--ports", ",".join(map(str, ports))]
    extra = (["--apply-round"] if apply_round else []) + (["--raw-peers", str(peer_port)] if raw_peers else [])
    nodes = [
        processes.start([*argv, "--index", str(i), "--data-dir", str(tmp_path / str(i)), *extra]) for i in range(3)
    ]
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if all(call("GET", f"http://127.0.0.1:{p}/status") == {"leader": 0} for p in ports):
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the floor's nodes did not connect"
            time.sleep(0.05)
        written = {f"k{i}": i for i in range(9)}
        for i, (key, value) in enumerate(written.items()):  # through the leader and both followers
            assert call("PUT", f"http://127.0.0.1:{ports[i % 3]}/kv/{key}", value) == {"result": "ok"}
        while any(rows(tmp_path / str(i) / "floor.sqlite") != written for i in range(3)):
            assert time.monotonic() < deadline + 10, "a node's SQLite lacks acknowledged writes"
            time.sleep(0.05)
    finally:
        for node in nodes:
            node.terminate()
        for node in nodes:
            node.wait(timeout=10)
