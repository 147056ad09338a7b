"""RSS of an idle node: a 3-node cluster, measured after it has been idle for a while.

.venv/bin/python bench/sidecar_rss.py [--idle 10]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from sidecar_common import cluster


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--idle", type=float, default=10.0)
    args = parser.parse_args()
    with cluster(3) as local:
        master = local.wait_master()
        time.sleep(args.idle)
        for node in local.running():
            role = "master" if node is master else "follower"
            print(f"idle RSS {node.name} ({role}): {rss_mb(node.pid or 0):.1f} MB")


if __name__ == "__main__":
    main()
