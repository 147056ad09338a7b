"""The operator's memory, measured: the real `coordinated operator` process against a real API server and three
real 3-node clusters of 100,000 keys each, as the chart runs it. Its peak resident set (VmHWM) after passes over
every pod must fit the chart's default memory limit (the trial: OOM-killed 5 times at 256Mi with three clusters
of 65,000, 65,000 and 19,066 keys, since every pass read every pod's whole state).

The API server holds the clusters' pods as a kubelet would report them (Running, Ready, each with its own IP);
each sidecar listens on that IP (an address of 127.0.0.0/8 of its own, on one shared port), so the operator
reaches it as it reaches a pod. The keys come in one restore of a snapshot written here.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from operator_schemas import REPO
from test_operator_apiserver import kubeconfig, kubectl, wait_until

from coordinated.coordination.state import KeyVersion
from coordinated.sidecar.features.snapshots import SnapshotFile, blob_name, encode_snapshot
from coordinated.tools.localcluster import LocalCluster, free_ports

__all__ = ["kubeconfig"]  # the module's API server

pytestmark = pytest.mark.timeout(600)

CLUSTERS, NODES, KEYS = 3, 3, 100_000
MIB = 1 << 20


def chart_memory_limit() -> int:
    """resources.limits.memory of the chart's values, in bytes."""
    limit = str(
        yaml.safe_load((REPO / "charts" / "coordinated-cluster" / "values.yaml").read_text())["resources"]["limits"][
            "memory"
        ]
    )
    assert limit.endswith("Mi"), limit
    return int(limit[:-2]) * MIB


def shared_port(hosts: list[str]) -> int:
    """A port free on every one of these addresses."""
    for _ in range(50):
        (port,) = free_ports(1)
        try:
            for host in hosts:
                with socket.socket() as probe:
                    probe.bind((host, port))
            return port
        except OSError:
            continue
    raise AssertionError("no port is free on every address")


def snapshot(path: Path, keys: int) -> None:
    """A snapshot of `keys` small keys (a key name and a short JSON value, as the trial's), in an fs repository."""
    kv = {f"app/item-{index:06d}": {"n": index} for index in range(keys)}
    file = SnapshotFile(
        snapshot="filled", uuid="0" * 32, cluster_name="filled", cluster_uuid="filled-uuid", term=1, version=1,
        state_uuid="s", start_time_in_millis=0, end_time_in_millis=0, kv=kv,
        kv_versions={key: KeyVersion(version=1, create_version=1) for key in kv}, persistent_settings={},
    )  # fmt: skip
    path.mkdir(parents=True, exist_ok=True)
    (path / blob_name("filled")).write_bytes(encode_snapshot(file))


@pytest.fixture(scope="module")
def clusters(
    kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[dict[str, dict[str, str]], int]]:
    """CLUSTERS clusters of NODES sidecars with KEYS keys each: per cluster, pod -> its IP; and the one HTTP port
    every sidecar listens on. Their resources and pods are in the API server, each cluster in its own namespace."""
    work = tmp_path_factory.mktemp("memory")
    repo = work / "repo"
    snapshot(repo, KEYS)
    hosts = {f"mem{c}": [f"127.0.{71 + c}.{1 + i}" for i in range(NODES)] for c in range(CLUSTERS)}
    port = shared_port([host for group in hosts.values() for host in group])
    running: dict[str, LocalCluster] = {}
    pods: dict[str, dict[str, str]] = {}
    try:
        # Every node starts at once, the clusters bootstrap side by side, and the restores run side by side.
        for name, addresses in hosts.items():
            # The default timeouts, as on Kubernetes: the harness's fast ones are too short for a restore of
            # 100,000 keys on a loaded machine (the master steps down before the followers have applied it).
            cluster = running[name] = LocalCluster(work / name, settings={"path.repo": str(repo)})
            names = [f"{name}-{i}" for i in range(NODES)]
            for pod, address in zip(names, addresses, strict=True):
                node = cluster.add(pod)
                node.host, node.http_port = address, port
            for pod in names:
                cluster.start(pod, initial_master_nodes=names)
            pods[name] = dict(zip(names, addresses, strict=True))

        def fill(name: str) -> str:
            cluster = running[name]
            for node in cluster.nodes.values():
                cluster.wait_http(node)
            master = cluster.wait_master(nodes=NODES, timeout=60)
            assert master is not None
            assert master.put("/_snapshot/filled", {"type": "fs", "settings": {"location": str(repo)}})[0] == 200
            status, restored = master.request("POST", "/_snapshot/filled/filled/_restore", timeout=120)
            assert status == 200 and restored["snapshot"]["keys"] == KEYS, restored
            return str(master.get("/")[1]["cluster_uuid"])

        with concurrent.futures.ThreadPoolExecutor(CLUSTERS) as pool:
            uuids = dict(zip(running, pool.map(fill, running), strict=True))
        for name, uuid in uuids.items():
            register(kubeconfig, name, pods[name], uuid)
        yield pods, port
    finally:
        for cluster in running.values():
            cluster.stop_all(graceful=False)


def register(kubeconfig: Path, name: str, pods: dict[str, str], uuid: str) -> None:
    """The cluster's resource (its UUID recorded, as after its bootstrap) and its pods, as a kubelet reports them."""
    kubectl(kubeconfig, "create", "namespace", name)
    kubectl(kubeconfig, "-n", name, "create", "serviceaccount", "default")
    resource = {
        "apiVersion": "coordinated.dev/v1alpha1",
        "kind": "CoordinatedCluster",
        "metadata": {"name": name, "namespace": name, "annotations": {"coordinated.dev/cluster-uuid": uuid}},
        "spec": {"replicas": NODES, "tls": {"enabled": False}, "auth": {"enabled": False}},
    }
    assert kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(resource)).returncode == 0
    labels = {
        "app.kubernetes.io/name": "coordinated-cluster",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": "node",
        "app.kubernetes.io/managed-by": "coordinated-operator",
        "coordinated.dev/voting": "true",
    }
    for pod, ip in pods.items():
        manifest = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod, "namespace": name, "labels": labels},
            "spec": {"containers": [{"name": "sidecar", "image": "none"}]},
        }
        assert kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(manifest)).returncode == 0
        status = {
            "status": {
                "phase": "Running",
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
            }
        }
        patched = kubectl(kubeconfig, "-n", name, "patch", "pod", pod, "--subresource=status", "--type=merge",
                          "-p", json.dumps(status))  # fmt: skip
        assert patched.returncode == 0, patched.stderr


def peak_resident(pid: int) -> int:
    """VmHWM: the most memory the process ever had resident, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_the_operators_peak_memory_at_three_clusters_of_100000_keys_fits_the_charts_limit(
    kubeconfig: Path, clusters: tuple[dict[str, dict[str, str]], int], tmp_path: Path
) -> None:
    pods, http_port = clusters
    environment = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    log = (tmp_path / "operator.log").open("wb")
    operator = subprocess.Popen(
        [sys.executable, "-m", "coordinated.cli", "operator", "--metrics-port", "0", "--reconcile-interval", "1",
         "--sidecar-url", f"http://{{ip}}:{http_port}", "--no-leader-election", "--standalone", "--all-namespaces"],
        env=environment, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:

        def observed(name: str) -> dict[str, object] | None:
            got = kubectl(kubeconfig, "-n", name, "get", "ccl", name, "-o", "json")
            status = json.loads(got.stdout).get("status") or {} if got.returncode == 0 else {}
            return status if status.get("master") and status.get("voters") == NODES else None

        for name in pods:
            wait_until(lambda name=name: observed(name) is not None, f"the operator to see {name}'s master", 120)  # type: ignore[misc]
        # Passes over every pod of every cluster, once a second each: the peak of a steady operator.
        passes_from = time.monotonic()
        while time.monotonic() - passes_from < 10:
            assert operator.poll() is None, (tmp_path / "operator.log").read_text()[-3000:]
            time.sleep(1)
        peak = peak_resident(operator.pid)
        limit = chart_memory_limit()
        print(
            f"operator peak resident memory (VmHWM) at {CLUSTERS} clusters x {NODES} pods of {KEYS:,} keys: "
            f"{peak / MIB:.0f} MiB; the chart's limit: {limit / MIB:.0f} MiB"
        )
        assert peak < limit, f"{peak / MIB:.0f} MiB is beyond the chart's {limit / MIB:.0f} MiB"
    finally:
        os.killpg(operator.pid, 15)
        operator.wait(timeout=30)
        log.close()
