"""The Lock recipe under faults, with real processes: holder processes (all on the blocking client, or all
on the asyncio one) contend for one lock through different nodes while a seeded nemesis kills (-9) and pauses (SIGSTOP/SIGCONT) the master and the holders.
Every holder writes to a fenced resource with its token; the resource refuses a token below the highest it
has seen.

What must hold:
- no fencing token is ever given to two holders, and each token is the create_version of that holder's key,
  which is never overwritten;
- the lock key's holders, in the order the cluster committed them, have strictly increasing tokens;
- the resource accepts only tokens in non-decreasing order, each from the holder the token was given to;
so no two live holders ever act with valid tokens at once, even when a paused holder wakes up believing
it still holds the lock (its writes are then refused).
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from coordinated.client import Client, CoordinatedError, KeyValue, NotFound, WatchEvent
from coordinated.tools.localcluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

HOLDER = Path(__file__).with_name("lock_holder.py")
LOCK = "locks/resource"
TTL_S = 2.0
NEMESIS_S = 25.0


class FencedResource:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.highest = 0
        self.accepted: list[tuple[str, int, int]] = []
        self.refused: list[tuple[str, int, int]] = []

    def write(self, holder: str, token: int, seq: int) -> bool:
        with self.lock:
            if token < self.highest:
                self.refused.append((holder, token, seq))
                return False
            self.highest = token
            self.accepted.append((holder, token, seq))
            return True


def serve(resource: FencedResource) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            accepted = resource.write(body["holder"], body["token"], body["seq"])
            payload = json.dumps({"accepted": accepted}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class Holders:
    """Holder processes, each through a different first node; stopped by PID."""

    def __init__(self, driver: str, urls: list[str], resource_url: str, workdir: Path) -> None:
        self.driver = driver
        self.urls = urls
        self.resource_url = resource_url
        self.workdir = workdir
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.count = 0

    def start(self) -> str:
        name = f"holder-{self.count}"
        first = self.count % len(self.urls)
        self.count += 1
        urls = self.urls[first:] + self.urls[:first]
        out = (self.workdir / f"{name}.out").open("wb")
        argv = [sys.executable, str(HOLDER), self.driver, name, self.resource_url, str(TTL_S), *urls]
        self.processes[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        return name

    def signal(self, name: str, sig: int) -> None:
        process = self.processes[name]
        if process.poll() is None:
            process.send_signal(sig)

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.kill()
            process.wait(10)

    def acquisitions(self) -> list[dict[str, Any]]:
        found = []
        for name in self.processes:
            for line in (self.workdir / f"{name}.out").read_text().splitlines():
                if line.startswith("{"):
                    found.append(json.loads(line))
        return found


def holder_now(urls: list[str]) -> str | None:
    try:
        with Client(urls, retry_timeout=2, request_timeout=2) as client:
            return str(client.get(LOCK, local=True).value["data"])
    except CoordinatedError:
        return None


@pytest.mark.parametrize("holders_driver", ["blocking", "asyncio"])
def test_fenced_lock_under_kills_and_pauses(
    holders_driver: str, make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    rng = random.Random(20261123)
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    urls = [node.url for node in nodes]
    resource = FencedResource()
    server = serve(resource)
    holders = Holders(holders_driver, urls, f"http://127.0.0.1:{server.server_address[1]}/", tmp_path)
    events: list[WatchEvent] = []
    instances: list[KeyValue] = []
    watching = threading.Event()
    stop_watch = threading.Event()

    def watch_lock() -> None:
        with Client(urls, retry_timeout=60) as client:
            start = client.watch_once(LOCK, None, timeout=0).version
            watching.set()
            for event in client.watch(LOCK, start):
                if event.key == LOCK or event.type == "reset":
                    events.append(event)
                if event.key == LOCK and event.type == "put":
                    # The key as it is now (a linearizable read): versions and holder of one key instance.
                    with contextlib.suppress(NotFound):
                        instances.append(client.get(LOCK))
                if stop_watch.is_set():
                    return

    watcher = threading.Thread(target=watch_lock, daemon=True)
    watcher.start()
    assert watching.wait(20)
    try:
        for _ in range(4):
            holders.start()
        deadline = time.monotonic() + NEMESIS_S
        faults: list[str] = []
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(1.0, 2.5))
            fault = rng.choice(["kill-master", "pause-master", "pause-holder", "kill-holder"])
            faults.append(fault)
            if fault in ("kill-master", "pause-master"):
                master = cluster.master()
                if master is None:
                    continue
                if fault == "kill-master":
                    cluster.kill(master)
                    time.sleep(rng.uniform(0.5, 2.0))
                    cluster.start(master.name)
                else:
                    cluster.kill(master, signal.SIGSTOP)
                    time.sleep(rng.uniform(1.0, 3.0))
                    cluster.kill(master, signal.SIGCONT)
            else:
                live = [name for name, p in holders.processes.items() if p.poll() is None]
                current = holder_now(urls)  # the holder, when there is one: the pause that matters
                victim = current if current in live and fault == "pause-holder" else rng.choice(live)
                if fault == "kill-holder":
                    holders.signal(victim, signal.SIGKILL)
                    holders.start()
                else:  # past its session's TTL: it wakes up believing it holds the lock
                    holders.signal(victim, signal.SIGSTOP)
                    time.sleep(TTL_S * rng.uniform(1.5, 2.5))
                    holders.signal(victim, signal.SIGCONT)
        time.sleep(3)
    finally:
        holders.stop_all()
        server.shutdown()
        stop_watch.set()
    for node in cluster.nodes.values():
        if not node.alive():
            cluster.start(node.name)
    watcher.join(30)

    acquired = holders.acquisitions()
    tokens: dict[int, str] = {}
    for acquisition in acquired:
        token, holder = acquisition["token"], acquisition["holder"]
        assert tokens.setdefault(token, holder) == holder, f"token {token} given to {tokens[token]} and {holder}"
    assert len(tokens) == len(acquired), "a holder was given the same token twice"
    puts = [event for event in events if event.type == "put" and event.key == LOCK]
    versions = [event.version for event in puts]
    assert versions == sorted(set(versions)), f"holders not in increasing token order: {versions}"
    for event in puts:
        if event.version in tokens:
            assert event.value["data"] == tokens[event.version], event
    # A lock key is created once and never overwritten: its holder is whoever created it, its token that
    # version. (A lock that let a second holder overwrite the key would fail here.)
    assert instances, "the watcher saw no holder"
    for instance in instances:
        assert instance.version == instance.create_version, f"the lock key was overwritten: {instance}"
        if instance.create_version in tokens:
            assert instance.value["data"] == tokens[instance.create_version], instance
    last = 0
    for holder, token, _ in resource.accepted:
        assert token >= last, "the resource accepted an older token"
        assert tokens.get(token) == holder, f"{holder} wrote with token {token}, given to {tokens.get(token)}"
        last = token
    # The run did something: several holders held the lock and wrote.
    assert len(acquired) >= 3 and len({a["holder"] for a in acquired}) >= 2, (acquired, faults)
    assert resource.accepted
    print(
        f"faults {faults}; {len(acquired)} acquisitions by {len({a['holder'] for a in acquired})} holders; "
        f"{len(resource.accepted)} writes accepted, {len(resource.refused)} refused (stale tokens)"
    )
