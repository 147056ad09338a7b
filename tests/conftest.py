"""Options and fixtures shared by the whole suite, and the markers derived from the fixtures a test uses.

A test that starts processes (node processes, the S3-compatible server, the API server, a Spark JVM, a Go
build, openssl) gets them from a fixture named in PROCESS_FIXTURES; the collection hook marks it from there.
`make test-fast` deselects those markers and passes --no-processes, which makes any other process start fail
the test that tried it, naming the fixtures to use instead.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from child_processes import ChildProcesses
from required_commands import require_command

from coordinated.tools.localcluster import LocalCluster
from coordinated.tools.previous_release import PreviousRelease, PreviousReleaseError
from coordinated.tools.previous_release import prepare as prepare_previous_release
from coordinated.tools.s3server import S3Server

REPO = Path(__file__).resolve().parents[1]

# Every fixture that starts a process, and the marker a test using it (directly or through another fixture)
# gets. Fixtures local to one module are listed by name too: a name here means "this fixture starts processes".
PROCESS_FIXTURES: dict[str, str] = {
    # real node processes (coordinated.tools.localcluster)
    "make_cluster": "integration",
    "clusters": "integration",
    "node": "integration",
    "secured": "integration",
    "fuzzed": "integration",
    "sidecar": "integration",
    "archive": "integration",
    # the previous release (compat/previous-release): a git worktree and its virtualenv, built once per machine
    "previous_release": "integration",
    # the S3-compatible server, built through the Go module proxy by scripts/install-tools.sh
    "s3_server_binary": "integration",
    # helm, kubeconform, promtool and the Kubernetes schemas (Go builds, scripts/install-tools.sh)
    "installed_tools": "integration",
    # porcupine-check (tools/porcupine, a Go build by scripts/install-tools.sh), and the fault run it checks
    "porcupine": "integration",
    "fault_history": "integration",
    # etcd, kube-apiserver and kube-scheduler (e2e/lib/build-kubernetes.sh)
    "kubeconfig": "integration",
    # openssl, for certificate authorities
    "openssl": "integration",
    "pki": "integration",
    # a fake audit command that the soak's audit runner starts (tests/bench/test_soak_audit.py)
    "fake_audit": "integration",
    # mount(8), for a full disk
    "small_volume": "integration",
    # a local SparkSession: a JVM
    "spark": "spark",
    # anything else a test starts itself: a script, the command line, a child process it kills
    "processes": "integration",
}


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
    group.addoption(
        "--rewrite",
        action="store_true",
        default=False,
        help="rewrite the expected outputs of transcript tests (testdata/) from what the code prints now",
    )
    parser.getgroup("processes").addoption(
        "--no-processes",
        action="store_true",
        default=False,
        help="fail any test that starts a process (make test-fast): processes come from PROCESS_FIXTURES",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for name in getattr(item, "fixturenames", ()):
            if marker := PROCESS_FIXTURES.get(name):
                item.add_marker(marker)


class ProcessRefused(RuntimeError):
    """A test started a process under --no-processes without asking a fixture of PROCESS_FIXTURES for it."""


def _refuse(what: str) -> Callable[..., NoReturn]:
    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise ProcessRefused(
            f"{what} under `make test-fast` (--no-processes), args {args[1:3] if what == 'Popen' else args[:2]}: "
            "a test that starts processes must get them from a fixture listed in PROCESS_FIXTURES "
            f"(tests/conftest.py: {', '.join(sorted(PROCESS_FIXTURES))}), which marks it integration or spark"
        )

    return refuse


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("--no-processes"):
        return
    # Every subprocess (subprocess.run, check_output, asyncio's create_subprocess_*) goes through
    # Popen._execute_child; multiprocessing and os-level spawns are refused too.
    patch = pytest.MonkeyPatch()
    patch.setattr(subprocess.Popen, "_execute_child", _refuse("Popen"))
    patch.setattr(asyncio, "create_subprocess_exec", _refuse("asyncio.create_subprocess_exec"))
    patch.setattr(asyncio, "create_subprocess_shell", _refuse("asyncio.create_subprocess_shell"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            patch.setattr(os, name, _refuse(f"os.{name}"))
    config.add_cleanup(patch.undo)


@pytest.fixture
def rewrite(request: pytest.FixtureRequest) -> bool:
    """Whether a transcript test writes its expected output instead of comparing (--rewrite or REWRITE=1)."""
    return bool(request.config.getoption("--rewrite") or os.environ.get("REWRITE"))


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


@pytest.fixture(scope="session")
def previous_release() -> PreviousRelease:
    """The release named in compat/previous-release, checked out from this clone and installed in a virtualenv of
    its own (`coordinated.tools.previous_release`; cached under ~/.cache/coordinated-cluster, keyed by revision).
    A test that needs it fails, never skips, when it cannot be prepared."""
    try:
        return prepare_previous_release()
    except PreviousReleaseError as error:
        pytest.fail(f"the previous release cannot be prepared: {error}")


@pytest.fixture(scope="session")
def installed_tools() -> dict[str, Path]:
    """helm, kubeconform, the Kubernetes schemas and the monitoring CRDs, which `make test` builds through the Go
    module proxy (scripts/install-tools.sh, a no-op once cached); their paths by name. Fails when they cannot be
    built (Go missing, no module proxy), never skips."""
    result = subprocess.run([str(REPO / "scripts" / "install-tools.sh")], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.fail(f"scripts/install-tools.sh failed (make test-deps runs it): {result.stderr[-2000:]}")
    return {key: Path(value) for key, _, value in (line.partition("=") for line in result.stdout.splitlines()) if value}


@pytest.fixture(scope="session")
def openssl() -> str:
    """The openssl command, which coordinated.tools.devcerts runs to make certificate authorities and certificates."""
    return require_command("openssl", "scripts/system-deps.sh test")


@pytest.fixture
def processes() -> Iterator[ChildProcesses]:
    children = ChildProcesses()
    yield children
    children.stop_all()


@pytest.fixture
def s3_server(tmp_path: Path, s3_server_binary: Path) -> Iterator[S3Server]:
    """A real S3-compatible server on loopback with an empty bucket `archive`, stopped by PID afterwards."""
    with S3Server(s3_server_binary, tmp_path / "s3") as server:
        server.create_bucket("archive")
        yield server


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
