"""Hook delivery to an application in the pod, and a stopping master handing over leadership."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from coordinated.tools.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def hook_receiver() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append(json.loads(body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/changed", received
    finally:
        server.shutdown()
        server.server_close()


def test_a_registered_hook_is_told_about_applied_states(
    make_cluster: Callable[..., LocalCluster], hook_receiver: tuple[str, list[dict[str, Any]]]
) -> None:
    url, received = hook_receiver
    cluster = make_cluster()
    node = cluster.bootstrap(1)[0]
    cluster.wait_master()
    status, body = node.put("/_hooks/app", {"url": url})
    assert status == 201 and body["created"], body
    status, body = node.put("/_cluster/metadata/k", {"v": 1})
    assert status == 200, body
    version = body["version"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(event["version"] >= version for event in received):
        time.sleep(0.05)
    latest = max(received, key=lambda event: event["version"])
    assert latest["version"] >= version and latest["hook"] == "app"
    assert latest["master_node"] == node.node_id()
    status, hooks = node.get("/_hooks")
    assert status == 200 and hooks["app"]["delivered"] >= 1


def test_a_stopping_master_hands_over_leadership_first(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    cluster.bootstrap(3)
    master = cluster.wait_master()
    term = master.get("/_cluster/state")[1]["term"]
    assert cluster.stop(master) == 0  # SIGTERM: graceful
    new_master = cluster.wait_master(exclude=master)
    assert new_master is not master
    assert new_master.get("/_cluster/state")[1]["term"] > term
    # It abdicated before exiting, rather than leaving the others to time out its leader checks.
    events = [
        json.loads(line)
        for segment in sorted((master.data_dir / "history").glob("*.jsonl"))
        for line in segment.read_text().splitlines()
        if line.strip()
    ]
    stepped_down = [event for event in events if event["type"] == "stepped_down"]
    assert stepped_down and "abdicated" in stepped_down[-1].get("reason", "")
