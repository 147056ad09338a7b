"""History bytes per write on each node: what decides how long a data volume lasts (docs/operator.md).

A local cluster of 3 sidecar processes takes WRITES one-key writes of a small value from CLIENTS concurrent
clients; each node's `history/` growth is divided by the writes. It prints one line per node.

    .venv/bin/python bench/history_bytes.py --writes 2000 --clients 1
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from coordinated.tools.localcluster import LocalCluster, LocalNode


def history_bytes(node: LocalNode) -> int:
    return sum(path.stat().st_size for path in (node.data_dir / "history").glob("segment-*"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--writes", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--nodes", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        cluster = LocalCluster(Path(work))
        try:
            nodes = cluster.bootstrap(args.nodes)
            master = cluster.wait_master()
            before = {node.name: history_bytes(node) for node in nodes}

            def write(i: int) -> None:
                status, body = master.put(f"/_cluster/metadata/key-{i % 100}", {"v": i})
                if status != 200:
                    raise RuntimeError(f"write {i}: {status} {body}")

            with ThreadPoolExecutor(args.clients) as pool:
                list(pool.map(write, range(args.writes)))
            time.sleep(1)  # the followers' last applied events
            for node in nodes:
                role = "master" if node is master else "follower"
                grown = history_bytes(node) - before[node.name]
                print(f"{node.name} ({role}): {grown / args.writes:.0f} bytes per write")
        finally:
            cluster.stop_all()


if __name__ == "__main__":
    main()
