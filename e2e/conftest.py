"""The e2e suite's fixtures: a kubeconfig, the chart installed with helm, a test namespace, measured figures
printed at the end, and diagnostics (operator and sidecar logs, events, the resource) on every failure.

Run it with `make e2e-test` (the local harness) or `e2e/kind.sh`; either needs KUBECONFIG, kubectl and helm
on PATH, and the image `coordinated-cluster:<version>` on the node.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator

import pytest
from kubernetes import client, config

from e2e.support import PROJECT_VERSION, REPO, kubectl, wait_until

RELEASE, OPERATOR_NAMESPACE = "coordinated-cluster", "coordinated-system"
TEST_NAMESPACE = "coordinated-e2e"
OPERATOR_SELECTOR = f"app.kubernetes.io/name=coordinated-cluster-operator,app.kubernetes.io/instance={RELEASE}"

_figures: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: tests against a real Kubernetes cluster")


@pytest.fixture(scope="session")
def kube() -> None:
    try:
        config.load_kube_config()
        client.VersionApi().get_code()
    except Exception as error:  # any way of not reaching a cluster ends here, with the reason
        pytest.fail(f"no Kubernetes cluster to test against (KUBECONFIG, `make e2e-up`): {error}", pytrace=False)


def helm(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("helm")
    if binary is None:
        raise RuntimeError("helm is not on PATH (scripts/install-tools.sh builds it)")
    done = subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed: {done.stderr.strip()}")
    return done


@pytest.fixture(scope="session")
def operator_release(kube: None) -> str:
    """The chart, installed as a user would, with its default reconcile interval (15 s): scaling steps follow
    each other by themselves, not by the periodic pass."""
    helm(
        "upgrade", "--install", RELEASE, str(REPO / "charts" / "coordinated-cluster"),
        "--namespace", OPERATOR_NAMESPACE, "--create-namespace",
        "--set", f"image.tag={PROJECT_VERSION}", "--set", "image.pullPolicy=Never",
        "--wait", "--timeout", "5m",
    )  # fmt: skip
    return RELEASE


@pytest.fixture(scope="session")
def namespace(kube: None) -> Iterator[str]:
    """A fresh namespace for the clusters under test (an earlier run's is removed first)."""
    core = client.CoreV1Api()
    kubectl("delete", "namespace", TEST_NAMESPACE, "--ignore-not-found", "--wait=true", timeout=300)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=TEST_NAMESPACE)))
    wait_until(
        "the default service account",
        lambda: core.read_namespaced_service_account("default", TEST_NAMESPACE),
        timeout=60,
    )
    yield TEST_NAMESPACE


@pytest.fixture
def figure() -> object:
    """Record a measured figure; they are printed together at the end of the run."""

    def record(line: str) -> None:
        _figures.append(line)
        print(line)

    return record


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _figures:
        terminalreporter.section("e2e figures")
        for line in _figures:
            terminalreporter.write_line(line)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed and call.when in ("setup", "call") and item.get_closest_marker("e2e") is not None:
        report.sections.append(("e2e diagnostics", diagnostics()))
    return report


def diagnostics() -> str:
    """What a red run needs to explain itself: operator and sidecar logs, events, the resources' status."""
    commands = [
        ("operator logs", ["-n", OPERATOR_NAMESPACE, "logs", "-l", OPERATOR_SELECTOR, "--tail=150", "--prefix"]),
        ("operator pods", ["-n", OPERATOR_NAMESPACE, "get", "pods", "-o", "wide"]),
        ("clusters", ["-n", TEST_NAMESPACE, "get", "ccl", "-o", "yaml"]),
        ("pods", ["-n", TEST_NAMESPACE, "get", "pods", "-o", "wide"]),
        (
            "sidecar logs",
            [
                "-n",
                TEST_NAMESPACE,
                "logs",
                "-l",
                "app.kubernetes.io/name=coordinated-cluster",
                "--tail=60",
                "--prefix",
                "--all-containers",
            ],
        ),
        ("events", ["-n", TEST_NAMESPACE, "get", "events", "--sort-by=.lastTimestamp"]),
    ]
    parts = []
    for title, args in commands:
        try:
            done = kubectl(*args, check=False, timeout=30)
            parts.append(f"--- {title}: kubectl {' '.join(args)}\n{done.stdout}{done.stderr}")
        except Exception as error:  # diagnostics must never hide the original failure
            parts.append(f"--- {title}: {error}")
    return "\n".join(parts)
