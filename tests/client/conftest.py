"""Fixtures of the client tests: `driver`, which runs a test once with the blocking client
and once with the asyncio one, through the same calls."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from client_drivers import Driver


@pytest.fixture(params=["blocking", "asyncio"])
def driver(request: pytest.FixtureRequest) -> Iterator[Driver]:
    driver = Driver(request.param)
    yield driver
    driver.stop()
