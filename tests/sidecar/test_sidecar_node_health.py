"""Health reports what the protocol hides: a follower that cannot persist, and peers of another cluster.

Nodes run in this process (real transport, real persistence, real client API), so that a disk failure can
be injected into one follower's store.
"""

from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from coordinated.coordination.state import ClusterState
from coordinated.sidecar.node import Node
from coordinated.sidecar.node_settings import build_config
from coordinated.sidecar.peers.receiver import transport_app
from coordinated.sidecar.storage.persist_monitor import MonitoredPersistedState
from coordinated.sidecar.web.app import client_app
from coordinated.sidecar.web.http_server import ClientAppRunner
from coordinated.tools.localcluster import FAST_SETTINGS, LocalCluster, free_ports

pytestmark = pytest.mark.timeout(120)


class InProcessNode:
    def __init__(self, name: str, data_dir: Path, ports: tuple[int, int], seeds: str, initial: str) -> None:
        self.http_port, self.transport_port = ports
        overrides = {**FAST_SETTINGS, "discovery.seed_hosts": seeds, "cluster.initial_master_nodes": initial}
        self.config = build_config(
            name=name,
            data_dir=str(data_dir),
            host="127.0.0.1",
            http_port=self.http_port,
            transport_port=self.transport_port,
            overrides=overrides,
        )
        self.node = Node(self.config)
        self.runners: list[web.AppRunner] = []

    async def start(self) -> None:
        transport = web.AppRunner(
            transport_app(self.node.handle_message, None, 1 << 24), access_log=None, handle_signals=False
        )
        client = ClientAppRunner(client_app(self.node))
        for runner, port in ((transport, self.transport_port), (client, self.http_port)):
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            self.runners.append(runner)
        await self.node.start()

    async def stop(self) -> None:
        await self.runners[1].cleanup()
        await self.node.stop(0.5)
        await self.runners[0].cleanup()

    async def get(self, session: aiohttp.ClientSession, path: str) -> tuple[int, Any]:
        async with session.get(f"http://127.0.0.1:{self.http_port}{path}") as response:
            return response.status, await response.json()

    async def put(self, session: aiohttp.ClientSession, path: str, body: Any) -> tuple[int, Any]:
        async with session.put(f"http://127.0.0.1:{self.http_port}{path}", json=body) as response:
            return response.status, await response.json()


async def until(predicate: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("timed out waiting for a condition")
        await asyncio.sleep(0.05)


def test_a_follower_that_cannot_persist_reports_it_at_once_and_recovers(tmp_path: Path) -> None:
    async def scenario() -> None:
        names = ["n1", "n2", "n3"]
        ports = free_ports(6)
        pairs = [(ports[2 * i], ports[2 * i + 1]) for i in range(3)]
        seeds = ",".join(f"127.0.0.1:{transport}" for _, transport in pairs)
        nodes = [
            InProcessNode(name, tmp_path / name, pair, seeds, ",".join(names))
            for name, pair in zip(names, pairs, strict=True)
        ]
        for node in nodes:
            await node.start()
        try:
            await until(lambda: all(n.node.status().applied_state.master_node is not None for n in nodes))
            await until(lambda: len({n.node.status().applied_state.version for n in nodes}) == 1)
            master_id = nodes[0].node.status().applied_state.master_node
            follower = next(n for n in nodes if n.node.node_id != master_id)
            master = next(n for n in nodes if n.node.node_id == master_id)
            store = follower.node.store.persisted
            real_write = store.set_last_accepted_state
            failing = True

            def write(state: ClusterState) -> None:
                if failing:
                    raise OSError(errno.EIO, "Input/output error")
                real_write(state)

            store.set_last_accepted_state = write  # type: ignore[method-assign]
            async with aiohttp.ClientSession() as session:
                assert (await follower.get(session, "/_cluster/health"))[1]["status"] == "green"
                assert (await master.put(session, "/_cluster/metadata/k", 1))[0] == 200
                await until(lambda: follower.node.status().persistence_failure is not None)
                status, health = await follower.get(session, "/_cluster/health")
                assert health["status"] == "red" and "Input/output error" in health["persistence_problem"]
                status, ready = await follower.get(session, "/readyz")
                assert status == 503 and "cannot persist" in ready["reason"]
                # The disk works again: the next publication it accepts clears the report.
                failing = False
                assert (await master.put(session, "/_cluster/metadata/k", 2))[0] == 200
                await until(lambda: follower.node.status().persistence_failure is None)
                status, health = await follower.get(session, "/_cluster/health")
                assert health["persistence_problem"] is None and health["status"] != "red"
                assert (await follower.get(session, "/readyz"))[0] == 200
        finally:
            for node in nodes:
                await node.stop()

    asyncio.run(scenario())


class _FailingStore:
    current_term = 0
    last_accepted_state = ClusterState("c")

    def __init__(self) -> None:
        self.fail = True

    def set_current_term(self, term: int) -> None:
        if self.fail:
            raise OSError(errno.ENOSPC, "No space left on device")

    def set_last_accepted_state(self, state: ClusterState) -> None:
        if self.fail:
            raise OSError(errno.EIO, "Input/output error")


def test_the_monitor_remembers_the_last_write_outcome() -> None:
    inner = _FailingStore()
    monitor = MonitoredPersistedState(inner)
    with pytest.raises(OSError):
        monitor.set_current_term(3)
    assert monitor.failure is not None and "No space left" in monitor.failure
    inner.fail = False
    monitor.set_last_accepted_state(ClusterState("c", version=2))
    assert monitor.failure is None


def test_a_node_with_another_clusters_data_reports_the_uuid_mismatch(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    first = make_cluster()
    (a,) = first.bootstrap(1)
    second = make_cluster()
    b, *others = second.bootstrap(3)
    assert a.get("/")[1]["cluster_uuid"] != b.get("/")[1]["cluster_uuid"]
    # One node of the second cluster is restarted alone, with seeds that point at the first cluster (same
    # cluster.name, another UUID): it cannot form its own cluster, and it must not stay quiet about why.
    for node in [*others, b]:
        second.stop(node)
    second.start(b.name, extra={"discovery.seed_hosts": a.transport_address})
    second.wait_http(b)

    def reported() -> bool:
        problem = b.get("/_cluster/health")[1].get("formation_problem") or ""
        return "cluster UUID mismatch" in problem and a.transport_address in problem

    end = time.monotonic() + 30
    while not reported():
        assert time.monotonic() < end, b.get("/_cluster/health")
        time.sleep(0.2)
    assert b.log_path is not None
    assert "another cluster with the same cluster.name" in b.log_path.read_text()
    assert a.get("/_cluster/health")[1]["number_of_nodes"] == 1  # and the first cluster is undisturbed
