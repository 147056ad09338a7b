"""`coordinated kv get` starts fast because it imports only what it uses: no other deployable, not asyncio, the
recipes, the prefix cache, tenacity (the retries, imported after a first failure), YAML (-o yaml), msgspec (txn
and import files, the local cluster's record), the package metadata, nor httpx's own command line and rich. A
check of what was imported, not of time: the time is measured against etcdctl in docs/performance.md."""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from child_processes import ChildProcesses

pytestmark = pytest.mark.integration

# What `kv get` must not import (a prefix covers a package's modules).
LAZY = (
    "asyncio",
    "coordinated.client.aio",
    "coordinated.client.recipes",
    "coordinated.client.prefix_cache",
    "tenacity",
    "yaml",
    "msgspec",
    "importlib.metadata",
    "rich",
    "pygments",
    # No other deployable: their programs join the command through entry points, looked up for other names only.
    "coordinated.sidecar",
    "coordinated.operator",
    "coordinated.audit",
    "coordinated.s3",
    "coordinated.coordination",
    "coordinated.simulation",
)

RUN = """
import json, sys
from coordinated.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


class Node(BaseHTTPRequestHandler):
    """Answers a key's read as a node does."""

    def do_GET(self) -> None:
        body = json.dumps({"key": "k", "value": 1, "version": 3, "create_version": 3}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def node() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Node)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_kv_get_imports_none_of_what_it_does_not_use(processes: ChildProcesses, node: str) -> None:
    env = {**os.environ, "COORDINATED_ENDPOINTS": node}
    done = processes.run(
        [sys.executable, "-c", RUN, "kv", "get", "k", "-o", "json"], env=env, capture_output=True, text=True
    )
    report = json.loads(done.stderr.splitlines()[-1])
    assert report["code"] == 0 and json.loads(done.stdout)["value"] == 1, done.stderr
    imported = [name for name in report["modules"] if name.startswith(LAZY)]
    assert imported == [], imported
    # What it needs is there: the client and its HTTP library.
    assert {"coordinated.client.sync", "httpx"} <= set(report["modules"])
