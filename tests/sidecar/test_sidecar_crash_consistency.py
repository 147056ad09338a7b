"""kill -9 of real node processes during writes: at random moments under a write load, and at fixed steps inside
a write (a test hook). After each restart every acknowledged write is there, and the node starts."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import pytest

from coordinated.tools.localcluster import FAST_SETTINGS, LocalCluster, LocalNode


class Writer:
    """One client writing new keys to a node as fast as it acknowledges them; records what was acknowledged."""

    def __init__(self, node: LocalNode, prefix: str) -> None:
        self.node = node
        self.prefix = prefix
        self.acked: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        index = 0
        while not self._stop.is_set():
            key = f"{self.prefix}-{index}"
            index += 1
            try:
                status, _ = self.node.put(f"/_cluster/metadata/{key}", {"i": index, "pad": "p" * (index % 300)}, 3)
            except OSError:
                continue
            if status == 200:
                self.acked.append(key)

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def missing_after_restart(cluster: LocalCluster, node: LocalNode, acked: list[str]) -> list[str]:
    cluster.start(node.name)
    cluster.wait_http(node, timeout=30)
    cluster.wait_master(timeout=30, nodes=1)
    status, state = node.get("/_cluster/state")
    assert status == 200
    return [key for key in acked if key not in state["metadata"]["kv"]]


def test_kill_9_at_random_moments_under_writes_loses_no_acknowledged_write(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    rng = random.Random(17)
    cluster = make_cluster()
    (node,) = cluster.bootstrap(1)
    acked: list[str] = []
    for round_ in range(6):
        with Writer(node, f"r{round_}") as writer:
            time.sleep(rng.uniform(0.2, 1.0))
            cluster.kill(node)
        assert writer.acked, "the write load made no progress"
        acked += writer.acked
        assert not missing_after_restart(cluster, node, acked), f"round {round_}: acknowledged writes lost"


@pytest.mark.parametrize(
    ("point", "sync"),
    [
        ("write:rows", "inline"),
        ("write:committed", "inline"),
        ("write:committed", "background"),  # committed, not yet synced, nothing after it released
        ("sync:before", "background"),
        ("sync:done", "background"),  # synced, the held effects not yet released
    ],
)
def test_kill_inside_a_write_of_the_real_node(
    make_cluster: Callable[..., LocalCluster], monkeypatch: pytest.MonkeyPatch, point: str, sync: str
) -> None:
    """The node kills itself at a step of its 40th write (rows written but not committed, or committed but not
    yet acknowledged, or around the sync of `persistence.sync: background`); restarted without the hook, it
    holds every acknowledged write."""
    cluster = make_cluster(settings={**FAST_SETTINGS, "persistence.sync": sync})
    monkeypatch.setenv("COORDINATED_TEST_CRASH_POINT", f"{point}@40")
    (node,) = cluster.bootstrap(1)
    monkeypatch.delenv("COORDINATED_TEST_CRASH_POINT")
    with Writer(node, "w") as writer:
        deadline = time.monotonic() + 30
        while node.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert not node.alive() and node.process is not None and node.process.returncode == -9
    assert writer.acked
    assert not missing_after_restart(cluster, node, writer.acked)
