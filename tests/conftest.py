"""Options shared by the whole suite."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinated.tools.s3server import S3Server


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("simulation")
    group.addoption(
        "--sim-seed",
        type=int,
        default=None,
        help="replay one random simulation schedule: the seed printed by a failing property test",
    )
    group.addoption(
        "--sim-nodes",
        type=int,
        default=None,
        help="with --sim-seed: the node count printed with the seed",
    )


REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def s3_server_binary() -> Path:
    """The S3-compatible server that `make test` builds (scripts/install-tools.sh, a no-op once cached). A test
    that needs it fails, never skips, when it cannot be built."""
    result = subprocess.run(
        [str(REPO / "scripts" / "install-tools.sh"), "S3_SERVER"], capture_output=True, text=True, timeout=1800
    )
    if result.returncode != 0:
        pytest.fail(f"scripts/install-tools.sh S3_SERVER failed (run make test-deps): {result.stderr[-2000:]}")
    return Path(result.stdout.strip().partition("=")[2])


@pytest.fixture
def s3_server(tmp_path: Path, s3_server_binary: Path) -> Iterator[S3Server]:
    """A real S3-compatible server on loopback with an empty bucket `archive`, stopped by PID afterwards."""
    with S3Server(s3_server_binary, tmp_path / "s3") as server:
        server.create_bucket("archive")
        yield server
