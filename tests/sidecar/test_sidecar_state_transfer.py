"""Real node processes with a small `transport.max_chunk_size`: a full state many times larger than one frame
reaches a node that lagged beyond the diff ring and a node that joins, in chunks (a frame over the limit would
be refused, so arriving at all proves the chunking)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from test_sidecar_integration import sent_bytes

from coordinated.tools.localcluster import FAST_SETTINGS, LocalCluster, LocalNode

pytestmark = pytest.mark.timeout(120)

CHUNK = 16 * 1024
SETTINGS = {
    **FAST_SETTINGS,
    "transport.max_chunk_size": "16kb",
    "cluster.publish.diff_history.max_diffs": "2",  # a node that misses 3 or more writes needs the full state
}
VALUE = "v" * 10_000
KEYS = 40  # ~400 KB of state: about 25 chunks


def fill(master: LocalNode) -> None:
    for i in range(KEYS):
        assert master.put(f"/_cluster/metadata/big-{i:02d}", VALUE)[0] == 200


def local_kv(node: LocalNode, version: int) -> dict[str, object]:
    status, state = node.get(f"/_cluster/state?local=true&wait_for_version={version}&wait_for_timeout=20s")
    assert status == 200, state
    kv: dict[str, object] = state["metadata"]["kv"]
    return kv


def discarded_chunks(node: LocalNode) -> list[str]:
    assert node.log_path is not None
    return [line for line in node.log_path.read_text().splitlines() if "discarded a chunked message" in line]


def test_a_follower_that_lagged_beyond_the_diff_ring_gets_the_full_state_in_chunks(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = make_cluster(settings=SETTINGS)
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master()
    fill(master)
    follower = next(n for n in nodes if n is not master)
    assert cluster.stop(follower) == 0
    cluster.wait_master(timeout=20, nodes=2)
    for i in range(5):  # more than the ring holds
        status, body = master.put(f"/_cluster/metadata/while-away-{i}", i)
        assert status == 200
    sent_before = sent_bytes(master, follower)
    cluster.start(follower.name)
    cluster.wait_http(follower)
    cluster.wait_master(timeout=30, nodes=3)
    status, body = master.put("/_cluster/metadata/after", 1)
    assert status == 200
    assert local_kv(follower, body["version"]) == local_kv(master, body["version"])
    assert sent_bytes(master, follower) - sent_before > KEYS * len(VALUE), "the full state, not diffs"
    assert discarded_chunks(follower) == []


def test_a_joining_node_gets_a_state_of_many_chunks(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(settings=SETTINGS)
    cluster.bootstrap(3)
    master = cluster.wait_master()
    fill(master)
    joining = cluster.start("node-4")
    cluster.wait_http(joining)
    cluster.wait_master(timeout=30, nodes=4)
    status, body = master.put("/_cluster/metadata/after", 1)
    assert status == 200
    kv = local_kv(joining, body["version"])
    assert kv == local_kv(master, body["version"]) and len(kv) == KEYS + 1
    assert discarded_chunks(joining) == []


def test_a_write_larger_than_a_chunk_is_forwarded_in_chunks(make_cluster: Callable[..., LocalCluster]) -> None:
    # A follower forwards the write to the master: a message of no term (not a publication), in chunks.
    cluster = make_cluster(settings=SETTINGS)
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master()
    follower = next(n for n in nodes if n is not master)
    value = "f" * (4 * CHUNK)
    status, body = follower.put("/_cluster/metadata/forwarded?timeout=5s", value, timeout=15.0)
    assert status == 200, body
    assert local_kv(master, body["version"])["forwarded"] == value
    assert discarded_chunks(master) == []
