"""A captured signed transport POST, replayed after the node that took it restarted, and to the new master after
a failover: both refused, so an acknowledged value never goes back to an older one. Real node processes with a
cluster secret; the test holds the secret, so it can make the request an eavesdropper would have captured."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from coordinated.coordination.messages import Envelope, ForwardedRequest, encode_envelope
from coordinated.coordination.requests.keys import KvPut
from coordinated.sidecar.peers.auth import NONCE_BYTES, TransportAuth
from coordinated.sidecar.peers.framing import MESSAGE_PATH
from coordinated.tools.localcluster import LocalCluster, LocalNode, http

pytestmark = pytest.mark.timeout(180)

SECRET = b"replay-test-secret-0123456789abcdef"


def captured_write(receiver: LocalNode, key: str, value: object) -> tuple[bytes, dict[str, str]]:
    """A signed POST of a forwarded write, as a node of an older version would send it to `receiver`."""
    request = ForwardedRequest("forwarding-node", 7, KvPut(key, value), 30_000)
    nonce = os.urandom(NONCE_BYTES).hex()
    body = encode_envelope(Envelope("127.0.0.1:1", request, request_nonce=nonce, receiver=receiver.transport_address))
    return body, TransportAuth(SECRET).sign(body)


def post(node: LocalNode, body: bytes, headers: dict[str, str]) -> int:
    status, _ = http("POST", f"http://{node.transport_address}{MESSAGE_PATH}", raw=body, headers=headers)
    return status


def value_of(node: LocalNode, key: str) -> object:
    status, answer = node.get(f"/_cluster/metadata/{key}")
    assert status in (200, 404), answer
    return answer["value"] if status == 200 else None


def wait_for_value(node: LocalNode, key: str, value: object, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while value_of(node, key) != value:
        assert time.monotonic() < deadline, f"{key} never became {value}"
        time.sleep(0.1)


def secured(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> LocalCluster:
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    cluster = make_cluster()
    cluster.settings["transport.secret_file"] = str(secret)
    return cluster


def test_a_captured_post_is_refused_by_the_same_node_after_a_restart(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    cluster = secured(make_cluster, tmp_path)
    (node,) = cluster.bootstrap(1)
    time.sleep(1.1)  # a node refuses what was signed in the second it started
    body, headers = captured_write(node, "config", "old")
    assert post(node, body, headers) == 204
    wait_for_value(node, "config", "old")
    assert node.put("/_cluster/metadata/config", "new")[0] == 200
    assert post(node, body, headers) == 401  # the replay cache has it

    cluster.stop(node)
    cluster.start(node.name)
    cluster.wait_http(node)
    cluster.wait_master(nodes=1)
    assert post(node, body, headers) == 401  # a new process, a new replay cache: refused all the same
    time.sleep(0.5)
    assert value_of(node, "config") == "new"


def test_a_captured_post_is_refused_by_the_new_master_after_a_failover(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    cluster = secured(make_cluster, tmp_path)
    cluster.bootstrap(3)
    master = cluster.wait_master(nodes=3)
    time.sleep(1.1)
    body, headers = captured_write(master, "config", "old")
    assert post(master, body, headers) == 204
    wait_for_value(master, "config", "old")
    assert master.put("/_cluster/metadata/config", "new")[0] == 200

    cluster.kill(master)
    successor = cluster.wait_master(exclude=master)
    assert post(successor, body, headers) == 401
    time.sleep(0.5)
    assert value_of(successor, "config") == "new"
