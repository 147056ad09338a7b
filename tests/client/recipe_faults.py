"""The harness of the recipes' fault tests: worker processes that use a recipe through the client library and
report what they do to a shared record, and a nemesis that kills (-9) and pauses (SIGSTOP past the session's
TTL) the master and the workers meanwhile.

The record is an HTTP server in the test process. Workers POST one JSON object per step:

- `{"op": "enter", "worker", "key", "token", "kind"?}` once they believe they hold (a lock, a slot), `token`
  being a version of their key (not below its `create_version`): the record then reads, linearizably, the key of every worker it
  believes is inside. A worker deletes its key before it reports `exit`, and a key instance (a name and a
  create version) never comes back, so two inside workers whose keys both exist held at once in one
  committed state: the `admits` rule of the test says which sets may;
- `{"op": "exit", "worker"}`;
- `{"op": "write", "worker", "token"}`: a write to a fenced resource, refused below the highest token seen;
- anything else is kept in `events`, in arrival order, for the test to check.
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

from coordinated.client import Client, CoordinatedError, NotFound
from coordinated.tools.localcluster import LocalCluster

WORKER = Path(__file__).with_name("recipe_worker.py")
TTL_S = 1.5  # the workers' sessions: short, so that a paused holder loses its session within the run

Holders = list[dict[str, Any]]


class Record:
    """What the workers reported, and the violations the record saw as they happened."""

    def __init__(self, urls: list[str], admits: Callable[[Holders], bool] = lambda inside: len(inside) <= 1) -> None:
        self.urls = urls
        self.admits = admits
        self.lock = threading.Lock()
        self.events: list[dict[str, Any]] = []
        self.inside: dict[str, dict[str, Any]] = {}
        self.entered: list[dict[str, Any]] = []
        self.holding: list[dict[str, Any]] = []  # the enters whose worker's key still existed when checked
        self.violations: list[str] = []
        self.highest = 0
        self.accepted: list[tuple[str, int]] = []
        self.refused: list[tuple[str, int]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def report(self, body: dict[str, Any]) -> dict[str, Any]:
        op = body["op"]
        if op == "enter":
            with self.lock:
                self.inside[body["worker"]] = body
                self.entered.append(body)
                inside = list(self.inside.values())
            self._check(inside, body)
        elif op == "exit":
            with self.lock:
                self.inside.pop(body["worker"], None)
        elif op == "write":
            with self.lock:
                if body["token"] < self.highest:
                    self.refused.append((body["worker"], body["token"]))
                    return {"accepted": False}
                self.highest = body["token"]
                self.accepted.append((body["worker"], body["token"]))
        else:
            with self.lock:
                self.events.append(body)
        return {"accepted": True}

    def _check(self, inside: Holders, entering: dict[str, Any]) -> None:
        """Which of the workers that believe they hold still have their key: those held together."""
        holding = []
        with Client(self.urls, retry_timeout=30, request_timeout=3) as client:
            for holder in inside:
                try:
                    key = client.get(holder["key"])
                except NotFound:
                    continue  # released, or its session ended: it no longer holds, whatever it believes
                if key.create_version <= holder["token"]:  # that holder's key, not a later one of the name
                    holding.append(holder)
        with self.lock:
            if entering in holding:
                self.holding.append(entering)
        if not self.admits(holding):
            with self.lock:
                self.violations.append(f"held together: {holding}")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        record = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                payload = json.dumps(record.report(body)).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                with contextlib.suppress(OSError):  # the worker was killed while it waited
                    self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


class Workers:
    """Worker processes of one recipe, each going first through a different node; stopped by PID."""

    def __init__(self, recipe: str, driver: str, urls: list[str], record: Record, workdir: Path) -> None:
        self.recipe, self.driver, self.urls, self.record, self.workdir = recipe, driver, urls, record, workdir
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.extras: dict[str, tuple[str, ...]] = {}

    def start(self, *extra: str) -> str:
        name = f"{self.recipe}-{len(self.processes)}"
        self.extras[name] = extra
        first = len(self.processes) % len(self.urls)
        urls = self.urls[first:] + self.urls[:first]
        out = (self.workdir / f"{name}.out").open("wb")
        argv = [
            sys.executable,
            str(WORKER),
            self.recipe,
            self.driver,
            name,
            self.record.url,
            str(TTL_S),
            ",".join(urls),
        ]
        process = subprocess.Popen([*argv, *extra], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.processes[name] = process
        out.close()
        return name

    def live(self) -> list[str]:
        return [name for name, process in self.processes.items() if process.poll() is None]

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

    def output(self) -> str:
        return "\n".join((self.workdir / f"{name}.out").read_text()[-2000:] for name in self.processes)


def nemesis(
    cluster: LocalCluster,
    workers: Workers,
    seconds: float,
    seed: int,
    victim: Callable[[], str | None] = lambda: None,
    restart: bool = True,
) -> list[str]:
    """Faults for `seconds`: kill -9 or SIGSTOP the master (restarted, resumed), kill -9 a worker (a new one
    takes its place when `restart`) or pause one past its TTL. `victim()` names the worker to prefer, the
    holder when there is one: the pause that matters. Returns the faults, for the failure message."""
    rng = random.Random(seed)
    faults: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(0.8, 1.8))
        fault = rng.choice(["kill-master", "pause-master", "pause-worker", "kill-worker"])
        faults.append(fault)
        if fault in ("kill-master", "pause-master"):
            master = cluster.master()
            if master is None:
                continue
            if fault == "kill-master":
                cluster.kill(master)
                time.sleep(rng.uniform(0.3, 1.0))
                cluster.start(master.name)
            else:
                cluster.kill(master, signal.SIGSTOP)
                time.sleep(rng.uniform(1.0, 2.5))
                cluster.kill(master, signal.SIGCONT)
            continue
        live = workers.live()
        if not live:
            continue
        preferred = victim()
        name = preferred if preferred in live and rng.random() < 0.7 else rng.choice(live)
        if fault == "kill-worker":
            workers.signal(name, signal.SIGKILL)
            if restart:
                workers.start(*workers.extras[name])  # in its place, in the same role
        else:  # past its session's TTL: it wakes up believing what it believed
            workers.signal(name, signal.SIGSTOP)
            time.sleep(TTL_S * rng.uniform(1.5, 2.2))
            workers.signal(name, signal.SIGCONT)
    return faults


def heal(cluster: LocalCluster) -> None:
    """Every node running and not paused, with a master: the next test starts from a whole cluster."""
    for node in cluster.nodes.values():
        if node.alive():
            with contextlib.suppress(OSError):
                cluster.kill(node, signal.SIGCONT)
        else:
            cluster.start(node.name)
    for node in cluster.nodes.values():
        cluster.wait_http(node)
    cluster.wait_master(timeout=30, nodes=len(cluster.nodes))


def quiet_read(urls: list[str], key: str) -> Any:
    """The key's value, or None (absent or unreachable), in a few seconds at most."""
    try:
        with Client(urls, retry_timeout=2, request_timeout=2) as client:
            return client.get(key, local=True).value
    except CoordinatedError:
        return None
