"""The kubectl plugin against a real kube-apiserver (the one test_operator_apiserver.py starts; no kubelet, so
pods stay Pending and port-forwards to them fail): pause and resume, and the one-line message and exit code of
an unknown cluster, a missing token Secret, a user RBAC forbids, unreachable pods, and each refusal of
`recover` (a wrong pod, a cluster with a quorum, no confirmation), and a dry run that changes nothing."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_operator_apiserver import kubeconfig, kubectl

from coordinated.kubectl.main import main

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore:Unverified HTTPS request")]

__all__ = ["kubeconfig"]  # the module's API server

NS = "plugin"
PLUGIN = Path(sys.executable).with_name("kubectl-coordinated")
OK, FAILED, BAD_INPUT, UNREACHABLE = 0, 1, 2, 3


def apply(config: Path, *documents: dict[str, Any]) -> None:
    for document in documents:
        done = kubectl(config, "apply", "-f", "-", stdin=yaml.safe_dump(document))
        assert done.returncode == 0, done.stderr


def cluster_objects(name: str, replicas: int) -> list[dict[str, Any]]:
    """A CoordinatedCluster, the StatefulSet and claims the operator would make, and Pending pods."""
    labels = {"app.kubernetes.io/name": "coordinated-cluster", "app.kubernetes.io/instance": name}
    container = {"name": "sidecar", "image": "coordinated-cluster:0.2.0", "imagePullPolicy": "Never"}
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "coordinated.dev/v1alpha1",
            "kind": "CoordinatedCluster",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "replicas": replicas,
                "serviceName": f"{name}-headless",
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
            },
        },
    ]
    for ordinal in range(replicas):
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": f"data-{name}-{ordinal}", "namespace": NS, "labels": labels},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            }
        )
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{name}-{ordinal}", "namespace": NS, "labels": labels},
                "spec": {"containers": [container], "automountServiceAccountToken": False},
            }
        )
    return objects


def token_secret(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NS},
        "stringData": {"token": "t"},
    }


@pytest.fixture(scope="module")
def world(kubeconfig: Path) -> Path:
    assert PLUGIN.exists(), f"{PLUGIN}: `make install` installs the entry point"
    apply(kubeconfig, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    apply(kubeconfig, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": NS}})
    apply(kubeconfig, *cluster_objects("demo", 3), *cluster_objects("nosecret", 1))
    apply(kubeconfig, *(token_secret(f"demo-{suffix}") for suffix in ("reader", "client", "admin")))
    return kubeconfig


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


Plugin = Callable[..., Done]


@pytest.fixture
def plugin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Plugin:
    """`kubectl-coordinated ARGS --kubeconfig CONFIG -n plugin`, run in this process (its start-up is most of a
    run's time); one test also runs the installed command."""

    def run(config: Path, *args: str, stdin: str = "") -> Done:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        capsys.readouterr()
        code = main([*args, "--kubeconfig", str(config), "-n", NS])
        out, err = capsys.readouterr()
        return Done(code, out, err)

    return run


def one_line_error(done: Done | subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    return lines[0]


def annotations(config: Path, name: str) -> dict[str, str]:
    found = kubectl(config, "-n", NS, "get", "ccl", name, "-o", "json")
    assert found.returncode == 0, found.stderr
    return dict(json.loads(found.stdout)["metadata"].get("annotations") or {})


def set_quorate(config: Path, status: str) -> None:
    condition = {"type": "Quorate", "status": status, "reason": "Test", "message": f"quorate {status}",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    patch = json.dumps({"status": {"phase": "NoMaster", "conditions": [condition]}})
    done = kubectl(config, "-n", NS, "patch", "ccl", "demo", "--subresource=status", "--type=merge", "-p", patch)
    assert done.returncode == 0, done.stderr


def test_pause_and_resume_set_and_remove_the_annotation(world: Path, plugin: Plugin) -> None:
    assert plugin(world, "pause", "demo").returncode == OK
    assert annotations(world, "demo").get("coordinated.dev/pause") == "true"
    assert plugin(world, "resume", "demo").returncode == OK
    assert "coordinated.dev/pause" not in annotations(world, "demo")


def test_the_installed_command_says_an_unknown_cluster_in_one_line_and_exits_1(world: Path) -> None:
    done = subprocess.run(
        [str(PLUGIN), "status", "nope", "--kubeconfig", str(world), "-n", NS],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == FAILED and done.stdout == "", done.stderr
    assert "CoordinatedCluster plugin/nope: not found" in one_line_error(done)


def test_an_unknown_cluster_exits_1(world: Path, plugin: Plugin) -> None:
    for args in (
        ("status", "nope"),
        ("kv", "get", "nope", "key"),
        ("pause", "nope"),
        ("recover", "nope", "--from", "nope-0"),
    ):
        done = plugin(world, *args)
        assert done.returncode == FAILED, (args, done.stderr)
        assert "CoordinatedCluster plugin/nope: not found" in one_line_error(done)


def test_a_missing_token_secret_exits_3_naming_it(world: Path, plugin: Plugin) -> None:
    done = plugin(world, "kv", "get", "nosecret", "key")
    assert done.returncode == UNREACHABLE, done.stderr
    assert "Secret plugin/nosecret-client: not found" in one_line_error(done)


def test_pods_that_cannot_be_reached_exit_3(world: Path, plugin: Plugin) -> None:
    done = plugin(world, "status", "demo")
    assert done.returncode == UNREACHABLE, done.stderr
    message = one_line_error(done)
    assert "no endpoint answered" in message and "port-forward to pod demo-0" in message, message
    done = plugin(world, "kv", "put", "demo", "key", "1", "--timeout", "0")
    assert done.returncode == UNREACHABLE, done.stderr
    assert "port-forward to pod demo-" in one_line_error(done)


def test_a_user_that_rbac_forbids_exits_3(world: Path, plugin: Plugin, tmp_path: Path) -> None:
    apply(world, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "nobody", "namespace": NS}})
    token = kubectl(world, "-n", NS, "create", "token", "nobody")
    assert token.returncode == 0, token.stderr
    config = yaml.safe_load(world.read_text())
    config["users"] = [{"name": "t", "user": {"token": token.stdout.strip()}}]
    forbidden = tmp_path / "kubeconfig"
    forbidden.write_text(yaml.safe_dump(config))
    for args in (("status", "demo"), ("pause", "demo"), ("kv", "get", "demo", "key")):
        done = plugin(forbidden, *args)
        assert done.returncode == UNREACHABLE, (args, done.stderr)
        assert "not allowed" in one_line_error(done) and "forbidden" in done.stderr, done.stderr


def test_recover_refuses_a_pod_that_is_not_a_voter_with_a_claim(world: Path, plugin: Plugin) -> None:
    for pod in ("demo-7", "nosecret-0", "demo"):
        done = plugin(world, "recover", "demo", "--from", pod, "--dry-run")
        assert done.returncode == BAD_INPUT, done.stderr
        assert "not one of demo's voters with a data claim (they are: demo-0, demo-1, demo-2)" in one_line_error(done)


def test_recover_refuses_a_cluster_with_a_quorum(world: Path, plugin: Plugin) -> None:
    set_quorate(world, "True")
    done = plugin(world, "recover", "demo", "--from", "demo-0", "--yes")
    assert done.returncode == FAILED, done.stderr
    assert "has a quorum (quorate True): recover is only for a quorum lost for good" in one_line_error(done)
    assert "coordinated.dev/pause" not in annotations(world, "demo")


def test_recover_dry_run_and_unconfirmed_change_nothing(world: Path, plugin: Plugin) -> None:
    set_quorate(world, "False")
    before = annotations(world, "demo")
    done = plugin(world, "recover", "demo", "--from", "demo-1", "--dry-run")
    assert done.returncode == OK, done.stderr
    assert "1. pause the operator" in done.stderr and "dry run: nothing was changed" in done.stderr
    assert "delete pvc data-demo-0 data-demo-2 --wait=true" in done.stderr
    assert "persistentVolumeClaim" in done.stderr and "data-demo-1" in done.stderr
    done = plugin(world, "recover", "demo", "--from", "demo-1", stdin="n\n")
    assert done.returncode == FAILED, done.stderr
    assert "not recovered: not confirmed" in done.stderr
    assert annotations(world, "demo") == before
    claims = kubectl(world, "-n", NS, "get", "pvc", "-o", "name").stdout.split()
    assert {f"persistentvolumeclaim/data-demo-{i}" for i in range(3)} <= set(claims)
