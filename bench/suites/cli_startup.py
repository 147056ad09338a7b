"""How long `coordinated kv get KEY` takes as a whole command, start-up included, against `etcdctl get KEY` in the
same run: what a shell loop pays per call.

A 3-node cluster of ours and a 3-member etcd, both on loopback, each with the key written. The two commands run
in turn (ours, etcd's, ours, ...) so that the machine's drift falls on both alike, each given every member's
address, as a script would give it. The wall time of each run is measured from outside, from the command's
start to its exit; the figures are the median (and the min and max) of each command and the ratio of the
medians, with the machine's load average before and after.

    scripts/system-deps.sh bench    # etcd and etcdctl
    flock /tmp/bench.lock .venv/bin/python -m bench cli-startup [--runs 20]
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness.local import cluster
from bench.harness.procs import spawn, stop
from coordinated.tools.localcluster import free_ports

KEY = "bench/greeting"


def start_etcd(workdir: Path, size: int = 3) -> tuple[list[subprocess.Popen[bytes]], str]:
    """`size` etcd members on loopback; their processes and client endpoints (comma separated)."""
    ports = free_ports(2 * size)
    peers = [f"http://127.0.0.1:{ports[2 * i + 1]}" for i in range(size)]
    clients = [f"http://127.0.0.1:{ports[2 * i]}" for i in range(size)]
    initial = ",".join(f"e{i}={peer}" for i, peer in enumerate(peers))
    processes = []
    for i in range(size):
        argv = ["etcd", "--name", f"e{i}", "--data-dir", str(workdir / f"e{i}")]
        argv += ["--listen-client-urls", clients[i], "--advertise-client-urls", clients[i]]
        argv += ["--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i]]
        argv += ["--initial-cluster", initial, "--initial-cluster-state", "new", "--log-level", "warn"]
        processes.append(spawn(argv, workdir / f"e{i}.log"))
    return processes, ",".join(clients)


def run_once(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return elapsed


def until_ok(argv: list[str], env: dict[str, str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while subprocess.run(argv, env=env, capture_output=True, timeout=60).returncode != 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{' '.join(argv)} did not succeed within {timeout} s")
        time.sleep(0.2)


def measure(runs: int) -> dict[str, Any]:
    etcdctl = shutil.which("etcdctl")
    if etcdctl is None or shutil.which("etcd") is None:
        raise SystemExit("needs etcd and etcdctl: scripts/system-deps.sh bench")
    coordinated = str(Path(sys.executable).with_name("coordinated"))
    with tempfile.TemporaryDirectory(prefix="cli-startup-") as workdir, cluster(3) as ours:
        members, etcd_endpoints = start_etcd(Path(workdir))
        try:
            env = {**os.environ, "ETCDCTL_API": "3"}
            env["COORDINATED_ENDPOINTS"] = ",".join(node.url for node in ours.nodes.values())
            theirs = [etcdctl, f"--endpoints={etcd_endpoints}", "get", KEY]
            mine = [coordinated, "kv", "get", KEY]
            until_ok([etcdctl, f"--endpoints={etcd_endpoints}", "put", KEY, '"hello"'], env)
            until_ok([coordinated, "kv", "put", KEY, '"hello"'], env)
            for _ in range(2):  # warm-up, not counted: the page cache, the nodes' connections
                run_once(mine, env)
                run_once(theirs, env)
            load_before = os.getloadavg()[0]
            times: dict[str, list[float]] = {"coordinated kv get": [], "etcdctl get": []}
            for _ in range(runs):
                times["coordinated kv get"].append(run_once(mine, env))
                times["etcdctl get"].append(run_once(theirs, env))
            load_after = os.getloadavg()[0]
        finally:
            for member in members:
                stop(member)
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {
        "runs": runs,
        "load": (load_before, load_after),
        "commands": {"coordinated kv get": " ".join(mine[1:]), "etcdctl get": " ".join(theirs[1:])},
        "wall_s": {name: (min(v), medians[name], max(v)) for name, v in times.items()},
        "ratio": medians["coordinated kv get"] / medians["etcdctl get"],
    }


def text(result: dict[str, Any]) -> str:
    lines = [
        f"{result['runs']} runs each, in turn; load average {result['load'][0]:.2f} before, {result['load'][1]:.2f} after"
    ]
    lines.append(f"{'command':<22}{'min s':>9}{'median s':>10}{'max s':>9}")
    for name, (low, median, high) in result["wall_s"].items():
        lines.append(f"{name:<22}{low:>9.3f}{median:>10.3f}{high:>9.3f}")
    lines.append(f"median ratio coordinated/etcdctl: {result['ratio']:.1f}x")
    return "\n".join(lines)


def main(runs: int) -> None:
    print(text(measure(runs)))
