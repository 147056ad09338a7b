"""Quotas stay exact under concurrency and a master failure: 16 clients create keys and sessions under one
prefix through every node while the master is killed with SIGKILL; the prefix ends with exactly `max_keys` keys
and `max_sessions` sessions, never more, and the new master's usage agrees with what the state holds."""

from __future__ import annotations

import signal
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from coordinated.tools.localcluster import LocalCluster, http

pytestmark = pytest.mark.timeout(240)

ADMIN, APP = "admin-token-0123456789", "app-token-0123456789abc"
MAX_KEYS, MAX_SESSIONS, CLIENTS, SESSION_CLIENTS = 60, 6, 16, 4


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_quotas_are_exact_under_16_clients_through_every_node_and_a_master_kill(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"admin {ADMIN}\nnone {APP} app\n")
    cluster = make_cluster(client_headers=bearer(ADMIN))
    cluster.settings["http.auth.tokens_file"] = str(tokens)
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master()
    role = {"keys": [{"prefixes": ["q/"], "privileges": ["read", "write", "session"]}]}
    assert master.put("/_security/role/app", role)[0] == 200
    assert master.put("/_security/role_mapping/app", {"roles": ["app"], "principals": ["app"]})[0] == 200
    quota = {"prefix": "q/", "max_keys": MAX_KEYS, "max_sessions": MAX_SESSIONS}
    assert master.put("/_quota/q", quota)[0] == 200

    outcomes: Counter[int] = Counter()
    created = threading.Semaphore(0)  # one release per key or session the clients saw created
    stop = threading.Event()
    lock = threading.Lock()

    def client(index: int) -> None:
        """Keys (or sessions) under q/ through node index % 3 and, when it fails, the next node, until stopped."""
        sequence, refusals = 0, 0
        while not stop.is_set() and refusals < 30:
            node = nodes[(index + sequence) % len(nodes)]
            sequence += 1
            try:
                if index < SESSION_CLIENTS:
                    status, _ = http("POST", node.url + "/_sessions", {"ttl": "120s"}, timeout=5, headers=bearer(APP))
                else:
                    url = f"{node.url}/_cluster/metadata/q/{index}-{sequence}?op_type=create"
                    status, _ = http("PUT", url, sequence, timeout=5, headers=bearer(APP))
            except OSError:
                status = 0  # a killed node: the next attempt goes to another one
            with lock:
                outcomes[status] += 1
            if status in (200, 201):
                created.release()
            refusals = refusals + 1 if status == 429 else 0

    threads = [threading.Thread(target=client, args=(index,), daemon=True) for index in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for _ in range(MAX_KEYS // 3):
        assert created.acquire(timeout=60)
    cluster.kill(master, signal.SIGKILL)
    survivors = [node for node in nodes if node is not master]
    new_master = cluster.wait_master(exclude=master, timeout=60)
    cluster.start(master.name)
    cluster.wait_http(master)
    for thread in threads:
        thread.join(timeout=120)
    stop.set()
    assert not any(thread.is_alive() for thread in threads)
    assert outcomes[429] >= CLIENTS, outcomes  # every client ended on refusals: the quota was reached

    count = new_master.get("/_cluster/metadata?prefix=q/&count_only=true")[1]["count"]
    sessions = [s for s in new_master.get("/_sessions")[1]["sessions"] if s.get("prefix") == "q/"]
    assert (count, len(sessions)) == (MAX_KEYS, MAX_SESSIONS), outcomes
    for node in [*survivors, master]:
        usage = node.get("/_quota/q")[1]["q"]["usage"]
        assert (usage["keys"], usage["sessions"]) == (MAX_KEYS, MAX_SESSIONS), (node.name, usage)
