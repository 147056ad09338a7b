"""Health names why a node cannot join, on real processes: a clock too far off for transport authentication
(the node runs under libfaketime, which `make test` installs) and another cluster secret; the refusing side
names it too."""

from __future__ import annotations

import glob
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from coordinated.tools.localcluster import LocalCluster, LocalNode

pytestmark = pytest.mark.timeout(180)


def libfaketime() -> str:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    assert found, "needs libfaketime: make test installs it (scripts/system-deps.sh, package faketime)"
    return found[0]


def with_secret(cluster: LocalCluster, path: Path, secret: bytes) -> None:
    path.write_bytes(secret)
    cluster.settings["transport.secret_file"] = str(path)


def wait_for_health(node: LocalNode, predicate: Callable[[dict[str, object]], bool], what: str) -> dict[str, object]:
    deadline = time.monotonic() + 30
    while True:
        _, health = node.get("/_cluster/health")
        if predicate(health):
            return health
        assert time.monotonic() < deadline, f"{node.name}'s health never showed {what}: {health}"
        time.sleep(0.2)


def formation(health: dict[str, object]) -> str:
    return str(health.get("formation_problem") or "")


def problem_reasons(health: dict[str, object]) -> str:
    problems = health["problems"]
    assert isinstance(problems, list)
    return " | ".join(str(problem["reason"]) for problem in problems)


def test_a_node_whose_clock_is_off_says_so(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    cluster = make_cluster()
    with_secret(cluster, tmp_path / "secret", b"diagnosis-secret-0123456789abcdef")
    nodes = cluster.bootstrap(2)
    late = cluster.add("node-3")
    late.argv_prefix = ["env", f"LD_PRELOAD={libfaketime()}", "FAKETIME=+900s", "FAKETIME_DONT_FAKE_MONOTONIC=1"]
    cluster.start("node-3")
    cluster.wait_http(late)

    health = wait_for_health(late, lambda h: "clock" in formation(h), "the clock")
    assert health["master_node"] is None
    assert "this node's clock is" in formation(health) and "ahead of the peer's" in formation(health)
    assert "transport authentication allows 300s" in formation(health)
    assert "an election is in progress" not in formation(health)
    # The nodes that refuse it name it as well (they have a master, so it is not a formation problem there).
    master = cluster.wait_master(nodes=2, exclude=late)
    refusing = wait_for_health(master, lambda h: "clock" in problem_reasons(h), "the refusal")
    assert "refused a transport connection" in problem_reasons(refusing)
    assert all(node.alive() for node in nodes)


def test_a_node_with_another_secret_says_it_was_refused(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    cluster = make_cluster()
    with_secret(cluster, tmp_path / "secret", b"diagnosis-secret-0123456789abcdef")
    cluster.bootstrap(2)
    other_secret = tmp_path / "other-secret"
    other_secret.write_bytes(b"not-the-cluster-secret-0123456789")
    stranger = cluster.start("node-3", extra={"transport.secret_file": str(other_secret)})
    cluster.wait_http(stranger)
    health = wait_for_health(stranger, lambda h: "bad signature" in formation(h), "the refusal")
    assert "refused this node's transport connection: 401 bad signature" in formation(health)
    assert "clock" not in formation(health)
