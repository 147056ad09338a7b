"""Kill -9 failover: the unavailability window a sequential writing client sees, over N trials, default
settings, 3 nodes. Measured from the signal to the first successful write after it; the writer rotates to
the next surviving node after an error, with a 2 s client timeout. Also: when a new master was first seen.

    .venv/bin/python bench/sidecar_failover.py [--trials 10]
"""

from __future__ import annotations

import argparse
import signal
import threading
import time

from sidecar_common import cluster, percentile

from coordinated.tools.localcluster import LocalCluster, LocalNode

CLIENT_TIMEOUT_S = 2.0


def trial(local: LocalCluster, index: int) -> tuple[float, float]:
    master = local.wait_master(timeout=60, nodes=3)
    survivors = [node for node in local.running() if node is not master]
    first_ok_after: list[float] = []
    killed_at = 0.0
    stop = threading.Event()
    killed = threading.Event()

    def writer() -> None:
        i = 0
        node: LocalNode = survivors[0]
        while not stop.is_set():
            sent_after_kill = killed.is_set()  # a write already in flight at the kill does not count
            try:
                status, _ = node.put(f"/_cluster/metadata/t{index}-{i}", i, timeout=CLIENT_TIMEOUT_S)
            except OSError:
                status = 0
            if status == 200:
                if sent_after_kill and not first_ok_after:
                    first_ok_after.append(time.monotonic())
                    return
            else:
                node = survivors[(survivors.index(node) + 1) % len(survivors)]
            i += 1

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    time.sleep(0.5)
    killed_at = time.monotonic()
    master.process.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
    killed.set()
    master.process.wait()  # type: ignore[union-attr]
    new_master = local.wait_master(timeout=60, exclude=master)
    observed = time.monotonic() - killed_at
    thread.join(30)
    stop.set()
    window = first_ok_after[0] - killed_at if first_ok_after else float("nan")
    print(
        f"   trial {index + 1:2d}: write window {window * 1000:7.1f} ms, new master {new_master.name} seen after {observed * 1000:7.1f} ms"
    )
    local.start(master.name)
    local.wait_http(master)
    return window, observed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=10)
    args = parser.parse_args()
    windows, observed = [], []
    with cluster(3) as local:
        for index in range(args.trials):
            window, seen = trial(local, index)
            windows.append(window * 1000)
            observed.append(seen * 1000)
    print(
        f"kill -9 failover, 3 nodes, default settings, client timeout {CLIENT_TIMEOUT_S}s: "
        f"write window p50={percentile(windows, 50):.0f}ms max={max(windows):.0f}ms; "
        f"new master observed p50={percentile(observed, 50):.0f}ms max={max(observed):.0f}ms"
    )


if __name__ == "__main__":
    main()
