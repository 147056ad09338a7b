"""`coordinated demo`: a local cluster of sidecar processes on 127.0.0.1, narrated in the terminal.

Election, writes through different nodes, kill -9 of the master with the measured write gap, scale up to 5
and back down to 3 with voting-config exclusions, then an audit of the recorded histories.
"""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType

import click

from coordinated.client import CoordinatedError
from coordinated.programs import run_program
from coordinated.tools.localcluster import LocalCluster, LocalNode

# Default protocol settings, except quicker discovery so the demo does not sit idle.
DEMO_SETTINGS = {"discovery.find_peers_interval": "200ms", "transport.request_timeout": "2s"}
BOLD, DIM, GREEN, RED, RESET = (
    ("\033[1m", "\033[2m", "\033[32m", "\033[31m", "\033[0m") if sys.stdout.isatty() else ("",) * 5
)


def say(text: str) -> None:
    print(text, flush=True)


def step(title: str) -> None:
    say(f"\n{BOLD}== {title}{RESET}")


def show_config(cluster: LocalCluster, node: LocalNode) -> None:
    config = cluster.voting_config(node)
    say(f"   voting config: committed {config['committed']}  accepted {config['accepted']}")
    if config["exclusions"]:
        say(f"   exclusions:    {config['exclusions']}")


def wait_config_size(cluster: LocalCluster, size: int, timeout: float = 30.0) -> LocalNode:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        master = cluster.master()
        if master is not None:
            config = cluster.voting_config(master)
            if len(config["committed"]) == size and config["committed"] == config["accepted"]:
                return master
        time.sleep(0.1)
    raise TimeoutError(f"the voting configuration did not reach {size} nodes")


def measure_failover(cluster: LocalCluster, master: LocalNode) -> tuple[float, float]:
    """Kill -9 the master under a sequential writer; (gap between acked writes, time to the new master)."""
    survivors = [node for node in cluster.running() if node is not master]
    acks: list[float] = []
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            node = survivors[i % len(survivors)]
            try:
                node.client().put(f"failover-{i}", i)
            except CoordinatedError:
                pass
            else:
                acks.append(time.monotonic())
            i += 1  # a new key each time, through the next survivor

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    time.sleep(1.0)
    killed_at = time.monotonic()
    cluster.kill(master)
    new_master = cluster.wait_master(timeout=30, exclude=master)
    elected_after = time.monotonic() - killed_at
    deadline = time.monotonic() + 10
    while not any(t > killed_at for t in acks) and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(5)
    before = [t for t in acks if t <= killed_at]
    after = [t for t in acks if t > killed_at]
    gap = (after[0] - before[-1]) if before and after else float("nan")
    say(f"   new master: {BOLD}{new_master.name}{RESET}, observed {elected_after * 1000:.0f} ms after the kill")
    return gap, elected_after


def run(nodes: int, workdir: Path) -> int:
    cluster = LocalCluster(workdir, settings=DEMO_SETTINGS, max_nodes=max(nodes, 5) + 1)
    interrupted = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        step(f"Starting {nodes} nodes on 127.0.0.1 (data and logs in {workdir})")
        say(
            f"   {DIM}no TLS and no tokens here, on loopback; to turn them on, see the security section of "
            f"docs/sidecar.md (-E transport.ssl.enabled=true, -E http.ssl.enabled=true, -E http.auth.tokens_file=...){RESET}"
        )
        names = [f"node-{i}" for i in range(1, nodes + 1)]
        for name in names:
            cluster.add(name)
        # Later nodes are found through the first ones; every node seeds the initial set.
        cluster.seed_names = list(names)
        started = time.monotonic()
        for name in names:
            node = cluster.start(name, initial_master_nodes=names)
            say(f"   {name}: pid {node.pid}, http {node.url}, transport {node.transport_address}")
        for name in names:
            cluster.wait_http(cluster.nodes[name])

        step("Election")
        master = cluster.wait_master(timeout=30, nodes=nodes)
        health = master.client().cluster_health()
        say(
            f"   {GREEN}elected{RESET} {BOLD}{master.name}{RESET} in term {health['term']}, "
            f"{(time.monotonic() - started) * 1000:.0f} ms after the first start (including process start-up)"
        )
        show_config(cluster, master)

        step("Writes through different nodes (followers forward to the master)")
        for i, node in enumerate(cluster.running()):
            value = {"written_via": node.name, "n": i}
            t0 = time.monotonic()
            written = node.client().put(f"greeting-{i}", value)
            say(f"   PUT via {node.name}: version {written.version} ({(time.monotonic() - t0) * 1000:.1f} ms)")
        reader = cluster.running()[-1]
        say(f"   linearizable GET greeting-0 via {reader.name}: {reader.client().get('greeting-0').value}")

        step("kill -9 of the master, with a client writing in a loop")
        say(f"   killing {master.name} (pid {master.pid})")
        gap, _ = measure_failover(cluster, master)
        say(f"   {BOLD}write gap seen by the client: {gap * 1000:.0f} ms{RESET}")
        killed = master
        master = cluster.wait_master(timeout=30)
        show_config(cluster, master)
        say(f"   restarting {killed.name}: it rejoins with the state on its disk")
        cluster.start(killed.name)
        cluster.wait_http(killed)
        master = cluster.wait_master(timeout=30, nodes=nodes)

        step("Scale up to 5 nodes")
        extra = [f"node-{i}" for i in range(nodes + 1, 6)]
        for name in extra:
            node = cluster.start(name)
            cluster.wait_http(node)
            say(f"   started {name} (pid {node.pid})")
        master = cluster.wait_master(timeout=30, nodes=max(nodes, 5))
        try:
            master = wait_config_size(cluster, 5, timeout=15)
        except TimeoutError as error:
            say(f"   {RED}{error}{RESET}")
            master = cluster.wait_master(timeout=30)
        show_config(cluster, master)

        leaving = [f"node-{i}" for i in range(4, 6)] if nodes <= 3 else extra
        step(f"Scale down to 3: exclude {leaving} from voting, stop them, clear the exclusions")
        master.client().add_voting_config_exclusions(leaving, timeout=30)
        say(f"   POST /_cluster/voting_config_exclusions?node_names={','.join(leaving)}: acknowledged")
        master = cluster.wait_master(timeout=30)
        show_config(cluster, master)
        for name in leaving:
            code = cluster.stop(cluster.nodes[name])
            say(f"   stopped {name} (SIGTERM, exit {code})")
        master.client().clear_voting_config_exclusions(wait_for_removal=True, timeout=30)
        say("   DELETE /_cluster/voting_config_exclusions?wait_for_removal=true: acknowledged")
        master = cluster.wait_master(timeout=30, nodes=len(cluster.running()))
        show_config(cluster, master)
        health = master.client().cluster_health()
        say(f"   cluster {health['status']}: {health['number_of_nodes']} nodes, master {master.name}")

        step("Stopping every node (SIGTERM: a stopping master hands over first)")
    except KeyboardInterrupt:
        interrupted = True
        say(f"\n{RED}interrupted{RESET}: stopping every node")
    except (TimeoutError, RuntimeError, OSError, CoordinatedError) as error:
        say(f"\n{RED}demo failed: {error}{RESET} (node logs in {workdir})")
        cluster.stop_all(graceful=False)
        return 1
    finally:
        cluster.stop_all(graceful=True)
        signal.signal(signal.SIGTERM, previous)
    if interrupted:
        return 130
    return audit(cluster, workdir)


def audit(cluster: LocalCluster, workdir: Path) -> int:
    histories = [str(node.data_dir / "history") for node in cluster.nodes.values()]
    step("Audit of the recorded histories")
    if importlib.util.find_spec("coordinated.audit") is None:
        say(f"   the audit is not installed; the histories are in: {' '.join(histories)}")
        return 0
    report_dir = workdir / "audit"
    command = [sys.executable, "-m", "coordinated.cli", "audit", *histories, "--report-dir", str(report_dir)]
    say(f"   {DIM}{' '.join(command)}{RESET}")
    audit_log = workdir / "audit.log"
    say(f"   {DIM}(Spark's own output goes to {audit_log}){RESET}")
    with audit_log.open("wb") as log:
        result = subprocess.run(command, check=False, stderr=log)
    verdict = {
        0: f"{GREEN}no violations{RESET}",
        1: f"{RED}violations found{RESET}",
        2: "unusable input",
        3: f"{RED}the audit did not complete (see {audit_log}){RESET}",
    }.get(result.returncode, f"{RED}the audit did not run (exit {result.returncode}, see {audit_log}){RESET}")
    say(f"   {verdict}; report: {report_dir / 'audit-report.json'}")
    # The audit's own code: 1 is violations, and 2 or 3 (no verdict) must not read as violations.
    return result.returncode if result.returncode in (0, 1, 2, 3) else 3


@click.command(
    "demo",
    help=__doc__.splitlines()[0] if __doc__ else None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option("--nodes", type=click.IntRange(1, 5), default=3, help="nodes to start with, 1 to 5 (default 3)")
@click.option("--workdir", help="where node data, logs and the audit report go (default: a temp dir)")
def demo(nodes: int, workdir: str | None) -> int:
    where = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="coordinated-demo-"))
    where.mkdir(parents=True, exist_ok=True)
    return run(nodes, where.resolve())


def main(argv: list[str] | None = None) -> int:
    return run_program(demo, argv, "coordinated demo")
