"""Local clusters of ours for the suites that drive the sidecar directly, and the small figures they share."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from coordinated.tools.localcluster import LocalCluster


@contextlib.contextmanager
def cluster(nodes: int, settings: dict[str, str] | None = None) -> Iterator[LocalCluster]:
    with tempfile.TemporaryDirectory(prefix="coordinated-bench-") as workdir:
        local = LocalCluster(Path(workdir), settings=settings if settings is not None else {}, max_nodes=nodes + 1)
        try:
            local.bootstrap(nodes, timeout=60)
            yield local
        finally:
            local.stop_all(graceful=False)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def rss_mb(pid: int) -> float:
    """The resident memory of process `pid`, in MiB (NaN once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return float("nan")
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")
