"""Fixtures of the client tests: real clusters, and `driver`, which runs a test once with the blocking client
and once with the asyncio one, through the same calls."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from client_drivers import Driver

from coordinated.tools.localcluster import LocalCluster


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Callable[..., LocalCluster]]:
    """Builds clusters of real node processes; every process is stopped by PID at teardown."""
    clusters: list[LocalCluster] = []

    def make(**kwargs: object) -> LocalCluster:
        cluster = LocalCluster(tmp_path / f"cluster{len(clusters)}", **kwargs)  # type: ignore[arg-type]
        clusters.append(cluster)
        return cluster

    yield make
    for cluster in clusters:
        cluster.stop_all(graceful=False)


@pytest.fixture(params=["blocking", "asyncio"])
def driver(request: pytest.FixtureRequest) -> Iterator[Driver]:
    driver = Driver(request.param)
    yield driver
    driver.stop()
