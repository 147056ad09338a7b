"""The kubectl plugin against the real cluster, run as `kubectl coordinated ...` (kubectl finds
`kubectl-coordinated` on PATH): `status`, `kv put/import/get`, `snapshot save/list` on a 3-node cluster with the
defaults (TLS, tokens, NetworkPolicy), then a quorum lost for good (two of three claims and their pods deleted,
as in test_02_recovery.py) and `recover --from` the survivor (refused before the loss): every key is back. One
cluster, `plug`, created and removed here with its claims."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from e2e.support import Cluster, apply, cluster_manifest, kubectl, remove_cluster, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

NAME = "plug"
KEYS = {f"app/key-{i}": {"n": i} for i in range(5)}
Figure = Callable[[str], None]


def plugin(namespace: str, *args: str, stdin: str = "", timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`kubectl coordinated ARGS -n NAMESPACE`, with the project's entry points on PATH for kubectl to find."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return subprocess.run(
        ["kubectl", "coordinated", *args, "-n", namespace],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PATH": path},
        check=False,
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"{done.args}: {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def ok_json(done: subprocess.CompletedProcess[str]) -> Any:
    """The output of a command run with `-o json`."""
    return json.loads(ok(done))


def test_status_kv_snapshot_and_recover_through_kubectl(operator_release: str, namespace: str, figure: Figure) -> None:
    try:
        run_through_the_plugin(Cluster(namespace, NAME), figure)
    finally:  # the uninstall test counts what is left in the namespace
        remove_cluster(namespace, NAME)
        kubectl("-n", namespace, "delete", "pvc", f"{NAME}-snapshots", "--ignore-not-found", "--wait=true")
        kubectl("-n", namespace, "delete", "job", f"{NAME}-unsafe-bootstrap", "--ignore-not-found", "--wait=true")


def run_through_the_plugin(cluster: Cluster, figure: Figure) -> None:
    namespace = cluster.namespace
    manifest = cluster_manifest(namespace, NAME, 3, secure=True)
    manifest["spec"]["snapshots"] = {"schedule": "0 3 * * *", "retention": 2}
    apply(manifest)
    wait_until("the cluster to settle at 3", lambda: cluster.settled(3), 420, interval=2)

    started = time.monotonic()
    status = ok_json(plugin(namespace, "status", NAME, "-o", "json"))
    assert status["phase"] == "Ready" and [n["pod"] for n in status["nodes"]] == [f"{NAME}-{i}" for i in range(3)]
    assert sum(n["master"] for n in status["nodes"]) == 1 and all(n["voting"] for n in status["nodes"]), status
    assert all(n["health"] == "green" for n in status["nodes"]), status
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"]), status

    first, *rest = KEYS.items()
    ok(plugin(namespace, "kv", "put", NAME, first[0], json.dumps(first[1])))
    lines = "".join(json.dumps({"key": key, "value": value}) + "\n" for key, value in rest)
    assert ok_json(plugin(namespace, "kv", "import", NAME, "-o", "json", stdin=lines))["imported"] == len(rest)
    read = ok_json(plugin(namespace, "kv", "get", NAME, "app/key-3", "-o", "json"))
    assert read["value"] == {"n": 3} and read["version"] > 0, read

    ok(plugin(namespace, "snapshot", "save", NAME, "before-loss"))
    listed = ok_json(plugin(namespace, "snapshot", "list", NAME, "-o", "json"))
    assert [s["snapshot"] for s in listed if s["state"] == "SUCCESS"] == ["before-loss"], listed
    figure(f"kubectl plugin: status, kv put, import, get, snapshot save and list: {time.monotonic() - started:.0f} s")

    refused = plugin(namespace, "recover", NAME, "--from", f"{NAME}-0", "--yes")
    assert refused.returncode == 1 and "has a quorum" in refused.stderr, refused.stderr
    wait_until(
        "the survivor to have applied every write (no applied lag)",
        lambda: ok_json(plugin(namespace, "status", NAME, "-o", "json"))["nodes"][0]["applied_lag"] == 0 or None,
        60,
    )
    lose_two_claims(cluster)

    recovery = time.monotonic()
    done = plugin(namespace, "recover", NAME, "--from", f"{NAME}-0", "--yes", timeout=900)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "[9/9] wait for the cluster to be Ready" in done.stderr and "recovered:" in done.stdout, done.stderr
    figure(f"kubectl plugin: recover --from to Ready: {time.monotonic() - recovery:.0f} s")
    assert cluster.status()["clusterUUID"] in done.stdout

    exported = ok(plugin(namespace, "kv", "export", NAME))
    assert {line["key"]: line["value"] for line in map(json.loads, exported.splitlines())} == KEYS


def lose_two_claims(cluster: Cluster) -> None:
    """Two volumes lost for good, as in test_02_recovery.py: their claims and pods go, the survivor alone
    cannot elect a master."""
    namespace = cluster.namespace
    kubectl("-n", namespace, "delete", "pvc", f"data-{NAME}-1", f"data-{NAME}-2", "--wait=false")
    kubectl("-n", namespace, "delete", "pod", f"{NAME}-1", f"{NAME}-2", "--wait=false")
    wait_until("the NoMaster phase", lambda: cluster.status().get("phase") == "NoMaster" or None, 180, interval=1)
