"""The CRD and the operator's API calls against a real kube-apiserver (with etcd), no nodes needed.

Runs when `etcd` is on PATH and a kube-apiserver binary is found ($KUBE_APISERVER, or the one the e2e
harness caches under ~/.cache/coordinated-cluster/kubernetes/*/bin); skipped otherwise. It checks what
kubeconform cannot: the CEL rules and their messages, defaults, the scale subresource, and that the
operator's server-side applies and status/annotation patches are accepted.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_schemas import REPO

from coordinated.operator.settings_validation import USER_SETTINGS
from coordinated.sidecar.node_settings import sidecar_registry

pytestmark = pytest.mark.filterwarnings("ignore:Unverified HTTPS request")

CRD = REPO / "crds" / "coordinatedclusters.coordinated.dev.yaml"
TOKEN = "operator-test-token"


def find_apiserver() -> str | None:
    if os.environ.get("KUBE_APISERVER"):
        return os.environ["KUBE_APISERVER"]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")  # as e2e/lib/common.sh
    cached = sorted(cache.glob("coordinated-cluster/kubernetes/*/bin/kube-apiserver"))
    return str(cached[-1]) if cached else None


def find_kubectl() -> str | None:
    """The one built beside the kube-apiserver (the same version; not on PATH), else any on PATH."""
    apiserver = find_apiserver()
    beside = Path(apiserver).with_name("kubectl") if apiserver else None
    return str(beside) if beside and beside.exists() else shutil.which("kubectl")


KUBECTL = find_kubectl()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    apiserver, etcd, openssl = find_apiserver(), shutil.which("etcd"), shutil.which("openssl")
    found = {"kube-apiserver": apiserver, "kubectl": KUBECTL, "etcd": etcd, "openssl": openssl}
    if missing := [name for name, path in found.items() if not path]:
        pytest.fail(
            f"missing {', '.join(missing)}: make test-deps installs them (scripts/system-deps.sh test: etcd, "
            "openssl; e2e/lib/build-kubernetes.sh: kube-apiserver, kubectl)"
        )
    assert apiserver and etcd and openssl
    work = tmp_path_factory.mktemp("apiserver")
    subprocess.run([openssl, "genrsa", "-out", work / "sa.key", "2048"], check=True, capture_output=True)
    subprocess.run(
        [openssl, "rsa", "-in", work / "sa.key", "-pubout", "-out", work / "sa.pub"], check=True, capture_output=True
    )
    (work / "tokens.csv").write_text(f"{TOKEN},admin,admin,system:masters\n")
    etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
    logs = [open(work / "etcd.log", "w"), open(work / "apiserver.log", "w")]  # noqa: SIM115
    processes = [
        subprocess.Popen(
            [
                etcd, "--name", "t", "--data-dir", work / "etcd",
                "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
                "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
                "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
                "--initial-cluster", f"t=http://127.0.0.1:{peer_port}",
            ],
            stdout=logs[0], stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            [
                apiserver, f"--etcd-servers=http://127.0.0.1:{etcd_port}", f"--secure-port={api_port}",
                "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--cert-dir={work / 'certs'}",
                f"--token-auth-file={work / 'tokens.csv'}", "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={work / 'sa.pub'}",
                f"--service-account-signing-key-file={work / 'sa.key'}",
                "--service-cluster-ip-range=10.98.0.0/24",
            ],
            stdout=logs[1], stderr=subprocess.STDOUT,
        ),
    ]  # fmt: skip
    config = work / "kubeconfig"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "t",
                        "cluster": {"server": f"https://127.0.0.1:{api_port}", "insecure-skip-tls-verify": True},
                    }
                ],
                "users": [{"name": "t", "user": {"token": TOKEN}}],
                "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t", "namespace": "default"}}],
                "current-context": "t",
            }
        )
    )
    try:
        deadline = time.monotonic() + 60
        while kubectl(config, "get", "--raw", "/readyz").returncode != 0:
            if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
                pytest.fail("kube-apiserver did not become ready:\n" + (work / "apiserver.log").read_text()[-3000:])
            time.sleep(0.5)
        applied = kubectl(config, "apply", "--server-side", "-f", str(CRD))
        assert applied.returncode == 0 or str(CRD) == "/dev/null", applied.stderr
        # Right after the apply the CRD may have no conditions yet, which `kubectl wait` reports as an error (an
        # "accessor error" on .status.conditions) instead of waiting: ask again until it is Established.
        deadline = time.monotonic() + 60
        while (
            established := kubectl(
                config, "wait", "--for=condition=Established", "crd/coordinatedclusters.coordinated.dev"
            )
        ).returncode != 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert established.returncode == 0, established.stderr
        yield config
    finally:
        for process in reversed(processes):
            process.terminate()
            process.wait(timeout=30)
        for log in logs:
            log.close()


def kubectl(config: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KUBECTL or "kubectl", "--kubeconfig", str(config), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def cluster(name: str, **spec: object) -> str:
    body = {"apiVersion": "coordinated.dev/v1alpha1", "kind": "CoordinatedCluster", "metadata": {"name": name}}
    return yaml.safe_dump({**body, "spec": spec})


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"replicas": -1}, "Invalid value: -1: spec.replicas in body should be greater than or equal to 0"),
        ({"replicas": 100}, "Invalid value: 100: spec.replicas in body should be less than or equal to 99"),
        (
            {"replicas": 3, "votingReplicas": 5},
            "spec.votingReplicas: Forbidden: spec.votingReplicas (5) cannot exceed spec.replicas (3)",
        ),
        ({"votingReplicas": 4}, "spec.votingReplicas (4) cannot exceed spec.replicas (3)"),  # the default 3
        ({"votingReplicas": 0}, "Invalid value: 0: spec.votingReplicas in body should be greater than or equal to 1"),
        (
            {"scheduling": {"tolerations": [{"key": "dedicated", "operator": "Sometimes"}]}},
            'spec.scheduling.tolerations[0].operator: Unsupported value: "Sometimes"',
        ),
        (
            {"scheduling": {"tolerations": [{"key": "dedicated", "effect": "NoRun"}]}},
            'spec.scheduling.tolerations[0].effect: Unsupported value: "NoRun"',
        ),
        ({"scheduling": {"nodeSelector": {"zone": 1}}}, 'spec.scheduling.nodeSelector.zone: Invalid value: "integer"'),
        (
            {"scheduling": {"priorityClassName": "High Priority"}},
            'spec.scheduling.priorityClassName: Invalid value: "High Priority"',
        ),
        (
            {
                "scheduling": {
                    "topologySpreadConstraints": [
                        {"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
                    ]
                }
            },
            "Invalid value: 0: spec.scheduling.topologySpreadConstraints[0].maxSkew in body should be greater than or equal to 1",
        ),
        (
            {"scheduling": {"topologySpreadConstraints": [{"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}]}},
            "spec.scheduling.topologySpreadConstraints[0].topologyKey: Required value",
        ),
        (
            {
                "scheduling": {
                    "affinity": {
                        "podAntiAffinity": {
                            "preferredDuringSchedulingIgnoredDuringExecution": [
                                {"weight": 500, "podAffinityTerm": {"topologyKey": "zone"}}
                            ]
                        }
                    }
                }
            },
            "Invalid value: 500: spec.scheduling.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight in body should be less than or equal to 100",
        ),
        (
            {
                "scheduling": {
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Near"}]}]
                            }
                        }
                    }
                }
            },
            'operator: Unsupported value: "Near"',
        ),
        (
            {"settings": {"discovery.zen.minimum_master_nodes": "2"}},
            "setting [discovery.zen.minimum_master_nodes] is from Zen1",
        ),
        ({"settings": {"node.name": "x"}}, "setting [node.name] is managed by the operator"),
        ({"settings": {"bogus": "x", "cluster.name": "ok"}}, "unknown setting [bogus]; docs/settings.md"),
        (
            {"settings": {"cluster.publish.timeout": "30", "cluster.election.duration": "1s"}},
            "invalid value for setting [cluster.publish.timeout] (30): expected a positive time with a unit",
        ),
        (  # more digits than the largest value has in its smallest unit: refused before any node sees it
            {"settings": {"cluster.publish.timeout": "99999999999999999999d"}},
            "invalid value for setting [cluster.publish.timeout] (99999999999999999999d): expected a positive time",
        ),
        (
            {"settings": {"watch.change_log.size": "lots"}},
            "invalid value for setting [watch.change_log.size] (lots): expected an integer of at least 1",
        ),
        (
            {"settings": {"cluster.fault_detection.leader_check.retry_count": "0"}},
            "invalid value for setting [cluster.fault_detection.leader_check.retry_count] (0): expected an integer",
        ),
        (
            {"settings": {"cluster.no_master_block": "reads"}},
            "invalid value for setting [cluster.no_master_block] (reads): expected all, write or metadata_write",
        ),
        (
            {"settings": {"cluster.auto_shrink_voting_configuration": "yes"}},
            '[cluster.auto_shrink_voting_configuration] (yes): expected "true" or "false"',
        ),
        (
            {"settings": {"cluster.metadata.max_value_size": "2 mib"}},
            "invalid value for setting [cluster.metadata.max_value_size] (2 mib): expected a positive byte size",
        ),
        (
            {"settings": {"cluster.publish.master_applies_last": "no"}},
            '[cluster.publish.master_applies_last] (no): expected "true" or "false"',
        ),
        ({"podDisruptionBudget": {"mode": "Custom"}}, "custom is required with mode Custom"),
        (
            {"podDisruptionBudget": {"mode": "Custom", "custom": {"minAvailable": 1, "maxUnavailable": 1}}},
            "exactly one",
        ),
        ({"audit": {"enabled": True, "schedule": "daily"}}, "cron expression"),
        ({"template": {"containers": [{"name": "sidecar", "image": "x"}]}}, "'sidecar' is reserved"),
        ({"settings": {"http.auth.tokens_file": "/t"}}, "setting [http.auth.tokens_file] is managed by the operator"),
        (
            {"settings": {"transport.ssl.enabled": "false"}},
            "setting [transport.ssl.enabled] is managed by the operator",
        ),
        (  # any concrete name of an affix setting the operator sets
            {"settings": {"s3.client.backups.endpoint": "s3.example:9000"}},
            "setting [s3.client.backups.endpoint] is managed by the operator",
        ),
        ({"tls": {"enabled": False, "issuerRef": {"name": "ca"}}}, "tls.issuerRef needs tls.enabled"),
        ({"tls": {"renewalFraction": 0.95}}, "spec.tls.renewalFraction in body should be less than or equal to 0.9"),
        ({"tls": {"certificateLifetime": "90"}}, "spec.tls.certificateLifetime in body should match"),
        ({"tls": {"clientAuthentication": "always"}}, 'Unsupported value: "always"'),
        ({"clientAccess": [{}]}, "each clientAccess entry needs a podSelector, a namespaceSelector or both"),
        ({"metricsAccess": [{}]}, "each metricsAccess entry needs a podSelector, a namespaceSelector or both"),
        ({"snapshots": {"schedule": "daily"}}, 'snapshots.schedule "daily" is not a cron expression'),
        ({"snapshots": {"retention": 0}}, "Invalid value: 0: spec.snapshots.retention in body should be greater"),
        (
            {"snapshots": {"volume": {"claimName": "backups", "storageClassName": "fast"}}},
            "snapshots.volume.storageClassName applies only to the claim the operator creates",
        ),
        (
            {"restoreFrom": {"snapshot": "demo-1"}},
            "spec.restoreFrom reads the snapshot from spec.snapshots' repository",
        ),
        ({"archive": {"bucket": "Histories"}}, "spec.archive.bucket in body should match"),
        (
            {"archive": {"bucket": "histories", "endpoint": "s3.example.com"}},
            "spec.archive.endpoint in body should match",
        ),
        (
            {"archive": {"bucket": "histories", "credentials": {"secretName": "k", "serviceAccountName": "sa"}}},
            "give credentials.secretName or credentials.serviceAccountName, not both",
        ),
        (
            {"snapshots": {"s3": {"bucket": "backups"}, "volume": {"claimName": "backups"}}},
            "snapshots go to s3 or to a volume, not both",
        ),
        (
            {"snapshots": {}, "restoreFrom": {"snapshot": "Demo 1"}},
            'restoreFrom.snapshot "Demo 1" is not a snapshot name',
        ),
    ],
)
def test_invalid_clusters_are_rejected_with_a_clear_message(kubeconfig: Path, spec: dict, message: str) -> None:
    result = kubectl(kubeconfig, "apply", "-f", "-", stdin=cluster("invalid", **spec))
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    # One message per mistake, and never the CEL placeholder instead of the value.
    assert result.stderr.count(message) == 1, result.stderr
    assert 'Invalid value: "integer"' not in result.stderr or "nodeSelector" in message, result.stderr
    if "votingReplicas" in message or "scheduling" in message:
        assert 'Invalid value: "object"' not in result.stderr, result.stderr


def test_every_user_setting_is_accepted_at_its_default(kubeconfig: Path) -> None:
    """docs/settings.md says each of these may go in spec.settings, so the API server must take them."""
    registry = sidecar_registry().settings
    settings = {name: registry[name].default for name in sorted(USER_SETTINGS) if registry[name].default is not None}
    applied = kubectl(kubeconfig, "apply", "-f", "-", stdin=cluster("defaults", settings=settings))
    assert applied.returncode == 0, applied.stderr


@pytest.mark.parametrize(
    ("before", "after", "message"),
    [
        ({}, {"storageClassName": "fast"}, 'it is unset (the default class), not "fast"'),
        ({"storageClassName": "fast"}, {}, 'it is "fast", not unset'),
        ({"storageClassName": "fast"}, {"storageClassName": "slow"}, 'it is "fast", not "slow"'),
    ],
)
def test_the_storage_class_cannot_be_added_removed_or_changed(
    kubeconfig: Path, before: dict, after: dict, message: str
) -> None:
    """A class added after creation was accepted and then wedged the operator on the StatefulSet's 422."""
    name = "storage-" + str(abs(hash((str(before), str(after)))) % 10**6)
    assert kubectl(kubeconfig, "apply", "-f", "-", stdin=cluster(name, storage=before)).returncode == 0
    changed = kubectl(kubeconfig, "apply", "-f", "-", stdin=cluster(name, storage=after))
    assert changed.returncode != 0 and "storage.storageClassName is immutable" in changed.stderr, changed.stderr
    assert message in changed.stderr, changed.stderr
    assert "spec.storage.storageClassName: Forbidden:" in changed.stderr and "Invalid value" not in changed.stderr
    same = kubectl(kubeconfig, "apply", "-f", "-", stdin=cluster(name, storage=before, replicas=5))
    assert same.returncode == 0, same.stderr
    kubectl(kubeconfig, "delete", "ccl", name, "--wait=false")


def test_restore_from_only_at_creation(kubeconfig: Path) -> None:
    snapshots = {"schedule": "0 * * * *", "volume": {"claimName": "demo-snapshots"}}
    restore = {"snapshot": "demo-20261123-010203"}
    assert kubectl(kubeconfig, "apply", "-f", "-", stdin=cluster("restoring", snapshots=snapshots)).returncode == 0
    stored = yaml.safe_load(kubectl(kubeconfig, "get", "ccl", "restoring", "-o", "yaml").stdout)["spec"]
    assert stored["snapshots"] == {
        **snapshots,
        "retention": 7,
        "volume": {**snapshots["volume"], "size": "1Gi", "accessMode": "ReadWriteOnce"},
    }
    added = kubectl(
        kubeconfig, "apply", "-f", "-", stdin=cluster("restoring", snapshots=snapshots, restoreFrom=restore)
    )
    assert "spec.restoreFrom can only be given when the cluster is created" in added.stderr, added.stderr
    created = kubectl(
        kubeconfig, "apply", "-f", "-", stdin=cluster("restored", snapshots=snapshots, restoreFrom=restore)
    )
    assert created.returncode == 0, created.stderr
    changed = {"snapshot": "demo-20261123-020304"}
    moved = kubectl(kubeconfig, "apply", "-f", "-", stdin=cluster("restored", snapshots=snapshots, restoreFrom=changed))
    assert "spec.restoreFrom can only be given when the cluster is created" in moved.stderr, moved.stderr
    dropped = kubectl(kubeconfig, "apply", "-f", "-", stdin=cluster("restored", snapshots=snapshots))
    assert dropped.returncode == 0, dropped.stderr
    status = {
        "snapshots": {
            "lastSnapshot": "restored-20261123-010203",
            "lastSnapshotTime": "2026-11-23T01:02:03Z",
            "lastSnapshotVersion": 12,
            "consecutiveFailures": 0,
            "retained": 1,
        },
        "restore": {"snapshot": "demo-20261123-010203", "completed": True, "version": 40, "keys": 3},
    }
    patch = json.dumps({"status": status})
    patched = kubectl(kubeconfig, "patch", "ccl", "restored", "--subresource=status", "--type=merge", "-p", patch)
    assert patched.returncode == 0, patched.stderr
    got = json.loads(kubectl(kubeconfig, "get", "ccl", "restored", "-o", "json").stdout)["status"]
    assert got["snapshots"] == status["snapshots"] and got["restore"] == status["restore"]
    for name in ("restoring", "restored"):
        kubectl(kubeconfig, "delete", "ccl", name, "--wait=false")


def test_defaults_scale_and_immutable_fields(kubeconfig: Path) -> None:
    spec = {"settings": {"cluster.name": "keep"}}
    assert kubectl(kubeconfig, "apply", "-f", "-", stdin=cluster("scaled", **spec)).returncode == 0
    stored = yaml.safe_load(kubectl(kubeconfig, "get", "ccl", "scaled", "-o", "yaml").stdout)["spec"]
    assert stored["replicas"] == 3 and stored["storage"]["size"] == "1Gi"
    assert stored["podDisruptionBudget"] == {"mode": "Managed"}
    # Security is on unless the spec says otherwise.
    assert stored["tls"] == {
        "enabled": True,
        "certificateLifetime": "2160h",
        "renewalFraction": 0.67,
        "caLifetime": "87600h",
        "clientAuthentication": "none",
    }
    assert stored["auth"] == {"enabled": True} and stored["networkPolicy"] == {"enabled": True}
    assert "clientAccess" not in stored
    assert stored["storage"]["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Delete",
    }
    assert kubectl(kubeconfig, "scale", "ccl/scaled", "--replicas=5").returncode == 0
    assert kubectl(kubeconfig, "get", "ccl", "scaled", "-o", "jsonpath={.spec.replicas}").stdout == "5"
    renamed = kubectl(kubeconfig, "apply", "-f", "-", stdin=cluster("scaled", settings={"cluster.name": "other"}))
    assert "setting [cluster.name] cannot change after creation (it was 'keep')" in renamed.stderr
    grown = kubectl(kubeconfig, "apply", "-f", "-", stdin=cluster("scaled", **spec, storage={"size": "5Gi"}))
    assert grown.returncode == 0, grown.stderr  # volumes grow in place (where the StorageClass allows it)
    same = kubectl(kubeconfig, "apply", "-f", "-", stdin=cluster("scaled", **spec, storage={"size": "5120Mi"}))
    assert same.returncode == 0, same.stderr  # the same quantity, spelt otherwise
    # Back to a smaller size: the API server cannot know whether the volumes ever grew (a class that cannot
    # expand leaves them as they were), so it takes it; the operator compares with the claims (volumes.py).
    back = kubectl(kubeconfig, "apply", "-f", "-", stdin=cluster("scaled", **spec, storage={"size": "1Gi"}))
    assert back.returncode == 0, back.stderr


def test_examples_are_accepted(kubeconfig: Path) -> None:
    for example in sorted((REPO / "examples").glob("*.yaml")):
        result = kubectl(kubeconfig, "apply", "--dry-run=server", "-f", str(example))
        assert result.returncode == 0, f"{example.name}: {result.stderr}"


def test_operator_writes_are_accepted(kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bootstrap passes through the real handler: pin, then create every child by server-side apply."""
    import kopf
    from kubernetes import config

    from coordinated.operator.kube import Kube
    from coordinated.operator.reconcile import driver
    from coordinated.operator.sidecar_client import SidecarConnections

    monkeypatch.setattr(kopf, "info", lambda *args, **kwargs: None)
    monkeypatch.setattr(kopf, "warn", lambda *args, **kwargs: None)
    example = (REPO / "examples" / "full.yaml").read_text()
    assert kubectl(kubeconfig, "apply", "-f", "-", stdin=example).returncode == 0
    config.load_kube_config(config_file=str(kubeconfig))

    async def three_passes() -> None:
        async with SidecarConnections() as http:
            memo = kopf.Memo(kube=Kube(), http=http)
            body = kopf.Body({"metadata": {"namespace": "default", "name": "orders"}})
            for _ in range(3):  # pin the bootstrap list, create the StatefulSet, then wait
                await driver.reconcile(body, memo, logging.getLogger("test"))

    asyncio.run(three_passes())
    stored = yaml.safe_load(kubectl(kubeconfig, "get", "ccl", "orders", "-o", "yaml").stdout)
    # The 3 voters of the 5 nodes bootstrap; the 2 non-voters wait for a master.
    assert stored["metadata"]["annotations"]["coordinated.dev/initial-master-nodes"] == ",".join(
        f"orders-{i}" for i in range(3)
    )
    assert stored["status"]["phase"] == "Pending", stored["status"]
    conditions = {c["type"]: c for c in stored["status"]["conditions"]}
    assert conditions["ReconciliationComplete"]["reason"] == "Wait", conditions
    for kind, name in [
        ("statefulset", "orders"),
        ("service", "orders-headless"),
        ("service", "orders"),
        ("configmap", "orders-bootstrap"),
        ("secret", "orders-transport"),
        ("serviceaccount", "orders"),
        ("poddisruptionbudget", "orders"),
        ("cronjob", "orders-audit"),
        ("networkpolicy", "orders"),
        *(("secret", f"orders-{suffix}") for suffix in ("ca", "certs", "admin", "client", "reader", "tokens")),
    ]:
        assert kubectl(kubeconfig, "get", kind, name).returncode == 0, f"{kind}/{name} missing"
    replicas = kubectl(kubeconfig, "get", "statefulset", "orders", "-o", "jsonpath={.spec.replicas}").stdout
    assert replicas == "3"
    # The scheduling fields reached the pod template as the API server validated them.
    template = json.loads(kubectl(kubeconfig, "get", "statefulset", "orders", "-o", "json").stdout)["spec"]["template"]
    # system-cluster-critical (2000000000), run under the non-preempting twin the operator made: the highest
    # value a class not named system-* may have, and preemptionPolicy Never (members never evict each other).
    assert template["spec"]["priorityClassName"] == "coordinated-nonpreempting-1000000000"
    twin = json.loads(
        kubectl(kubeconfig, "get", "priorityclass", "coordinated-nonpreempting-1000000000", "-o", "json").stdout
    )
    assert (twin["value"], twin["preemptionPolicy"]) == (1000000000, "Never")
    assert template["spec"]["tolerations"][0]["key"] == "dedicated"
    assert {"nodeAffinity", "podAntiAffinity"} <= template["spec"]["affinity"].keys()
    assert template["spec"]["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"


def test_the_operator_observes_its_nodes_and_never_an_audit_jobs_pods(kubeconfig: Path) -> None:
    """After the first audit run, the CronJob's finished pods counted as cluster nodes (N+1, never Ready)."""
    from kubernetes import config

    from coordinated.operator import manifests
    from coordinated.operator.kube import Kube
    from coordinated.operator.spec import ClusterSpec

    config.load_kube_config(config_file=str(kubeconfig))
    kubectl(kubeconfig, "create", "namespace", "audited")
    kubectl(kubeconfig, "-n", "audited", "create", "serviceaccount", "default")
    spec = ClusterSpec.from_resource(
        {"metadata": {"name": "demo", "namespace": "audited"}, "spec": {"audit": {"enabled": True}}}
    )
    node_labels = manifests.statefulset(spec, 1)["spec"]["template"]["metadata"]["labels"]
    cronjob = manifests.audit_cronjob(spec, 1)
    assert cronjob is not None
    # The API server takes the CronJob as the operator writes it (its pod failure policy names the container).
    unowned = {**cronjob, "metadata": {k: v for k, v in cronjob["metadata"].items() if k != "ownerReferences"}}
    applied = kubectl(kubeconfig, "apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(unowned))
    assert applied.returncode == 0, applied.stderr
    audit_labels = cronjob["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    for name, labels in (("demo-0", node_labels), ("demo-audit-29112-x1", audit_labels)):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "audited", "labels": labels},
            "spec": {"containers": [{"name": "sidecar", "image": "none"}]},
        }
        assert kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(pod)).returncode == 0
    observed = asyncio.run(Kube().pods("audited", manifests.node_selector_string(spec)))
    assert list(observed) == ["demo-0"]


def _secret(kubeconfig: Path, name: str) -> dict[str, bytes]:
    import base64

    data = json.loads(kubectl(kubeconfig, "get", "secret", name, "-o", "json").stdout)["data"]
    return {key: base64.b64decode(value) for key, value in data.items()}


def test_certificates_are_renewed_and_dropped_in_place_with_the_same_ca(kubeconfig: Path) -> None:
    """Renewal and scale-down rewrite the certificates Secret by server-side apply; the CA never changes."""
    import datetime

    from kubernetes import config

    from coordinated.operator.kube import Kube
    from coordinated.operator.reconcile import security
    from coordinated.operator.reconcile.context import Secured
    from coordinated.operator.spec import ClusterSpec

    body = {"metadata": {"name": "renewed", "namespace": "default", "uid": "", "generation": 1}, "spec": {}}
    created = kubectl(kubeconfig, "apply", "-f", "-", stdin=cluster("renewed", replicas=3))
    assert created.returncode == 0, created.stderr
    body["metadata"]["uid"] = kubectl(kubeconfig, "get", "ccl", "renewed", "-o", "jsonpath={.metadata.uid}").stdout
    config.load_kube_config(config_file=str(kubeconfig))
    spec = ClusterSpec.from_resource({**body, "spec": {"tls": {"certificateLifetime": "10h", "renewalFraction": 0.5}}})
    now = datetime.datetime.now(datetime.UTC)
    pods = ("renewed-0", "renewed-1", "renewed-2")
    log = logging.getLogger("test")

    async def secure(at: datetime.datetime, pods: tuple[str, ...]) -> Secured:
        return await security.ensure_security(Kube(), spec, pods, write=True, logger=log, now=at)

    first = asyncio.run(secure(now, pods))
    ca, certs = _secret(kubeconfig, "renewed-ca"), _secret(kubeconfig, "renewed-certs")
    tokens = _secret(kubeconfig, "renewed-tokens")["tokens"].decode()
    assert first.token and f"admin {first.token}" in tokens.splitlines()
    assert f"writer {_secret(kubeconfig, 'renewed-client')['token'].decode()}" in tokens.splitlines()
    assert [reason for _, reason, _ in first.events] == ["CertificateAuthorityCreated", "CertificatesIssued"]

    again = asyncio.run(secure(now + datetime.timedelta(hours=1), pods))
    assert again.events == () and _secret(kubeconfig, "renewed-certs") == certs and again.token == first.token

    later = asyncio.run(secure(now + datetime.timedelta(hours=6), pods[:2]))
    renewed = _secret(kubeconfig, "renewed-certs")
    assert [reason for _, reason, _ in later.events] == ["CertificatesIssued"]
    assert renewed["renewed-0.crt"] != certs["renewed-0.crt"] and renewed["ca.crt"] == ca["ca.crt"]
    assert "renewed-2.crt" not in renewed and "renewed-2.key" not in renewed  # scaled away: gone
    assert _secret(kubeconfig, "renewed-ca") == ca


class RunningOperator:
    """The real Kopf operator (every handler of coordinated.operator.handlers) in a thread of this process."""

    def __init__(self) -> None:
        from coordinated.operator.config import OperatorConfig

        self.loop: asyncio.AbstractEventLoop | None = None
        # The periodic pass is an hour away unless a test shortens it (the config is shared through the memo).
        self.config = OperatorConfig(metrics_port=0, sidecar_timeout_seconds=0.2, reconcile_interval_seconds=3600.0)
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self._run, name="kopf", daemon=True)
        self.passes: list[str] = []  # one entry per reconcile pass, the cluster's name

    def _run(self) -> None:
        import kopf

        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        memo = kopf.Memo(config=self.config)
        self.loop.run_until_complete(
            kopf.operator(clusterwide=True, standalone=True, stop_flag=self.stop_flag, memo=memo)
        )

    def periodic_loops(self) -> int:
        async def count() -> int:
            tasks = asyncio.all_tasks()
            return sum(1 for task in tasks if task.get_coro().__name__ == "reconcile_periodically")  # type: ignore[union-attr]

        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(count(), self.loop).result(timeout=30)


@pytest.fixture(scope="module")
def running_operator(kubeconfig: Path) -> Iterator[RunningOperator]:
    from coordinated.operator import handlers  # noqa: F401  (registers the handlers with Kopf)
    from coordinated.operator.reconcile import driver

    patch = pytest.MonkeyPatch()
    patch.setenv("KUBECONFIG", str(kubeconfig))  # read when kubernetes.config is imported, so also:
    patch.setattr("kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))
    operator = RunningOperator()
    real_reconcile = driver.reconcile

    async def counted(body: Any, memo: Any, logger: Any) -> Any:
        operator.passes.append(body["metadata"]["name"])
        return await real_reconcile(body, memo, logger)

    patch.setattr(driver, "reconcile", counted)
    operator.thread.start()
    try:
        yield operator
    finally:
        operator.stop_flag.set()
        operator.thread.join(timeout=60)
        patch.undo()


def wait_until(check: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.2)


def status_of(kubeconfig: Path, name: str) -> dict[str, Any]:
    result = kubectl(kubeconfig, "get", "ccl", name, "-o", "json")
    return dict(json.loads(result.stdout).get("status") or {}) if result.returncode == 0 else {}


def test_one_reconcile_loop_and_a_constant_rate_while_clusters_come_and_go(
    kubeconfig: Path, running_operator: RunningOperator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each new cluster used to start one more periodic loop (Kopf's per-object memo copy), none ever stopped."""
    interval = 0.5
    monkeypatch.setattr(running_operator.config, "reconcile_interval_seconds", interval)
    assert kubectl(kubeconfig, "apply", "-f", "-", stdin=cluster("survivor", replicas=1)).returncode == 0
    for index in range(4):
        name = f"transient-{index}"
        assert kubectl(kubeconfig, "apply", "-f", "-", stdin=cluster(name, replicas=1)).returncode == 0
        wait_until(lambda name=name: status_of(kubeconfig, name).get("phase"), f"{name} handled")  # type: ignore[misc]
        assert kubectl(kubeconfig, "delete", "ccl", name, "--wait=true").returncode == 0
    assert running_operator.periodic_loops() == 1

    # The rate: passes of the survivor over a window of 10 intervals. One loop makes ~10; five made ~50.
    before = running_operator.passes.count("survivor")
    time.sleep(10 * interval)
    passes = running_operator.passes.count("survivor") - before
    print(f"survivor: {passes} passes in {10 * interval:.1f}s with a {interval}s interval")
    assert 1 <= passes <= 10 + 3


def test_status_follows_pod_changes_without_waiting_for_the_periodic_pass(
    kubeconfig: Path, running_operator: RunningOperator
) -> None:
    """The periodic pass is an hour away here: only the pod watch can update the status."""
    assert kubectl(kubeconfig, "apply", "-f", "-", stdin=cluster("watched", replicas=2)).returncode == 0
    wait_until(lambda: status_of(kubeconfig, "watched").get("phase"), "the first status")
    assert status_of(kubeconfig, "watched")["replicas"] == 0
    labels = {
        "app.kubernetes.io/name": "coordinated-cluster",
        "app.kubernetes.io/instance": "watched",
        "app.kubernetes.io/component": "node",
        "app.kubernetes.io/managed-by": "coordinated-operator",
    }
    kubectl(kubeconfig, "create", "serviceaccount", "default")  # no controller-manager creates it here
    for ordinal in range(2):  # no nodes run here: the pods stay Pending, which is all the watch needs
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"watched-{ordinal}", "labels": labels},
            "spec": {"containers": [{"name": "sidecar", "image": "none"}]},
        }
        assert kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(pod)).returncode == 0
    wait_until(lambda: status_of(kubeconfig, "watched").get("replicas") == 2, "the status to count 2 pods")
    assert kubectl(kubeconfig, "delete", "pod", "watched-0", "watched-1", "--grace-period=0", "--force").returncode == 0
    wait_until(lambda: status_of(kubeconfig, "watched").get("replicas") == 0, "the status to count 0 pods")


def test_the_phase_follows_a_pause_and_a_resume_at_once(kubeconfig: Path, running_operator: RunningOperator) -> None:
    """The periodic pass is an hour away: the pause annotation and its removal alone must move the phase (it
    read Paused a pass after a resume)."""
    assert kubectl(kubeconfig, "apply", "-f", "-", stdin=cluster("paused", replicas=1)).returncode == 0
    wait_until(lambda: status_of(kubeconfig, "paused").get("phase") == "Pending", "the first status")
    kubectl(kubeconfig, "annotate", "ccl", "paused", "coordinated.dev/pause=true")
    wait_until(lambda: status_of(kubeconfig, "paused").get("phase") == "Paused", "the phase to say Paused", timeout=20)
    kubectl(kubeconfig, "annotate", "ccl", "paused", "coordinated.dev/pause-")
    wait_until(lambda: status_of(kubeconfig, "paused").get("phase") == "Pending", "the phase to follow the resume", 20)
    assert kubectl(kubeconfig, "delete", "ccl", "paused", "--wait=true").returncode == 0


def test_an_existing_rolling_update_statefulset_becomes_on_delete(kubeconfig: Path) -> None:
    """Operators before rolling restarts applied RollingUpdate with a partition; re-applying switches it."""
    from kubernetes import config

    from coordinated.operator import manifests
    from coordinated.operator.kube import Kube
    from coordinated.operator.spec import ClusterSpec

    config.load_kube_config(config_file=str(kubeconfig))
    body = {"metadata": {"name": "upgraded", "namespace": "default", "uid": "", "generation": 1}, "spec": {}}
    assert kubectl(kubeconfig, "apply", "-f", "-", stdin=cluster("upgraded")).returncode == 0
    body["metadata"]["uid"] = kubectl(kubeconfig, "get", "ccl", "upgraded", "-o", "jsonpath={.metadata.uid}").stdout
    spec = ClusterSpec.from_resource(body)
    old = manifests.statefulset(spec, 3)
    old["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    asyncio.run(Kube().apply(old))
    asyncio.run(Kube().apply(manifests.statefulset(spec, 3, manifests.BUILTIN_TLS)))
    strategy = kubectl(kubeconfig, "get", "sts", "upgraded", "-o", "jsonpath={.spec.updateStrategy}").stdout
    assert json.loads(strategy) == {"type": "OnDelete"}


# ---- placement, against a real kube-scheduler over nodes that exist only in the API ----------------------
def find_scheduler() -> str:
    """The kube-scheduler built beside the kube-apiserver (make test-deps builds both): its absence is a failure."""
    apiserver = find_apiserver()
    assert apiserver, "no kube-apiserver: `make test-deps` builds it"
    scheduler = Path(apiserver).with_name("kube-scheduler")
    assert scheduler.exists(), f"{scheduler} is missing: `make test-deps` builds it beside the kube-apiserver"
    return str(scheduler)


@pytest.fixture(scope="module")
def scheduler(kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    log = open(tmp_path_factory.mktemp("scheduler") / "scheduler.log", "w")  # noqa: SIM115
    process = subprocess.Popen(
        [find_scheduler(), f"--kubeconfig={kubeconfig}", "--leader-elect=false", "--secure-port=0"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def fake_node(kubeconfig: Path, name: str, labels: dict[str, str]) -> None:
    """A Ready node with room for pods, as a kubelet would register it; no kubelet ever runs the pods."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
    }
    assert kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(node)).returncode == 0
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    status = {
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fake"}],
        }
    }
    patched = kubectl(
        kubeconfig, "patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps(status)
    )
    assert patched.returncode == 0, patched.stderr
    # The API server taints a new node not-ready; the node lifecycle controller (not running here) would lift it.
    untainted = kubectl(kubeconfig, "patch", "node", name, "--type=merge", "-p", '{"spec":{"taints":null}}')
    assert untainted.returncode == 0, untainted.stderr


def create_pods_of(kubeconfig: Path, statefulset: dict[str, Any], namespace: str) -> list[str]:
    """The StatefulSet controller's part: its pods, from its template (an emptyDir for the data claim, which no
    provisioner binds here)."""
    template = statefulset["spec"]["template"]
    names = []
    for ordinal in range(statefulset["spec"]["replicas"]):
        name = f"{statefulset['metadata']['name']}-{ordinal}"
        spec = json.loads(json.dumps(template["spec"]))
        spec["volumes"].append({"name": "data", "emptyDir": {}})
        spec["hostname"], spec["subdomain"] = name, statefulset["spec"]["serviceName"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": template["metadata"]["labels"]},
            "spec": spec,
        }
        created = kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(pod))
        assert created.returncode == 0, created.stderr
        names.append(name)
    return names


def placed(kubeconfig: Path, namespace: str, pods: list[str]) -> dict[str, str]:
    """pod -> the node the scheduler bound it to, once every pod is bound."""
    nodes: dict[str, str] = {}

    def bound() -> bool:
        for pod in pods:
            got = kubectl(kubeconfig, "-n", namespace, "get", "pod", pod, "-o", "jsonpath={.spec.nodeName}")
            if got.stdout:
                nodes[pod] = got.stdout
        return len(nodes) == len(pods)

    wait_until(bound, f"the scheduler to bind {pods}", timeout=60)
    return nodes


def test_the_default_placement_spreads_voters_over_zones_and_still_schedules_on_one_node(
    kubeconfig: Path, scheduler: None
) -> None:
    """The rendered StatefulSet's pods, scheduled by a real kube-scheduler: eight nodes in three zones take one
    voter per zone (and per node); then, with one node left and no zone labels, every pod still lands."""
    from kubernetes import config

    from coordinated.operator import manifests, placement
    from coordinated.operator.kube import Kube
    from coordinated.operator.spec import ClusterSpec

    config.load_kube_config(config_file=str(kubeconfig))
    for namespace in ("spread", "single"):
        kubectl(kubeconfig, "create", "namespace", namespace)
        kubectl(kubeconfig, "-n", namespace, "create", "serviceaccount", "demo")
    # Six nodes in zone a, one in b and one in c: spreading over hosts alone would put two or three voters in a
    # (nine times in ten, at random), so one voter per zone is the zone rule's doing.
    zones = {f"zone-node-{i}": "zone-a" if i < 6 else f"zone-{'bc'[i - 6]}" for i in range(8)}
    for name, zone in zones.items():
        fake_node(kubeconfig, name, {"topology.kubernetes.io/zone": zone})
    spec = ClusterSpec.from_resource({"metadata": {"name": "demo", "namespace": "spread"}, "spec": {}})
    nodes = placed(kubeconfig, "spread", create_pods_of(kubeconfig, manifests.statefulset(spec, 3), "spread"))
    assert len({zones[node] for node in nodes.values()}) == 3, nodes  # one voter per zone
    # The operator's own view of it: its pod observations, the nodes' zones, and the condition.
    observed = asyncio.run(Kube().pods("spread", manifests.node_selector_string(spec)))
    voter_nodes = {name: pod.node_name for name, pod in observed.items() if pod.node_name}
    assert voter_nodes == nodes
    node_zones = asyncio.run(Kube().zones(frozenset(voter_nodes.values())))
    condition = placement.voters_spread(voter_nodes, node_zones)
    assert condition is not None and condition.status, condition

    # One node without a zone label, the others cordoned: every pod schedules on it (the rules only prefer).
    for name in zones:
        kubectl(kubeconfig, "cordon", name)
    fake_node(kubeconfig, "lonely", {})
    single = ClusterSpec.from_resource({"metadata": {"name": "demo", "namespace": "single"}, "spec": {}})
    nodes = placed(kubeconfig, "single", create_pods_of(kubeconfig, manifests.statefulset(single, 3), "single"))
    assert set(nodes.values()) == {"lonely"}
    condition = placement.voters_spread(nodes, asyncio.run(Kube().zones(frozenset(nodes.values()))))
    assert condition is not None and (condition.status, condition.reason) == (False, "SharedNode")
    assert condition.message.startswith("demo-0, demo-1 and demo-2 share node lonely")


def test_a_placement_that_cannot_be_scheduled_names_the_schedulers_reason(kubeconfig: Path, scheduler: None) -> None:
    from kubernetes import config

    from coordinated.operator import manifests, placement
    from coordinated.operator.kube import Kube
    from coordinated.operator.spec import ClusterSpec

    config.load_kube_config(config_file=str(kubeconfig))
    kubectl(kubeconfig, "create", "namespace", "nowhere")
    kubectl(kubeconfig, "-n", "nowhere", "create", "serviceaccount", "demo")
    spec = ClusterSpec.from_resource(
        {
            "metadata": {"name": "demo", "namespace": "nowhere"},
            "spec": {"scheduling": {"nodeSelector": {"pool": "gpu"}}},
        }
    )
    create_pods_of(kubeconfig, manifests.statefulset(spec, 1), "nowhere")

    def refused() -> bool:
        pods = asyncio.run(Kube().pods("nowhere", manifests.node_selector_string(spec)))
        return bool(pods) and all(pod.unschedulable for pod in pods.values())

    wait_until(refused, "the scheduler to refuse the pod", timeout=60)
    pods = asyncio.run(Kube().pods("nowhere", manifests.node_selector_string(spec)))
    condition = placement.pods_scheduled({name: pod.unschedulable for name, pod in pods.items() if pod.unschedulable})
    assert (condition.status, condition.reason) == (False, "Unschedulable")
    assert condition.message.startswith("demo-0 cannot be scheduled: 0/")
    assert "didn't match Pod's node affinity/selector" in condition.message, condition.message


# ---- leader election on a real Lease ----------------------------------------------------------------------
def test_replicas_elect_one_leader_on_a_lease_and_another_takes_over(kubeconfig: Path) -> None:
    """The Lease calls as the API server takes them: create, replace with the resourceVersion read (a stale
    one is a conflict, never an overwrite), and a takeover once the holder stopped renewing (a moved clock:
    the election never compares the holder's time with its own)."""
    from dataclasses import replace

    from kubernetes import config

    from coordinated.operator.leadership import LeaderElection, LeaseConflict, LeaseStore, Timing

    config.load_kube_config(config_file=str(kubeconfig))
    now = [0.0]
    log: list[str] = []

    def candidate(name: str) -> LeaderElection:
        return LeaderElection(
            LeaseStore("default", "coordinated-operator"), name, lambda: log.append(f"{name} leads"),
            lambda: log.append(f"{name} stops"), Timing(15, 10, 2), lambda: now[0],
        )  # fmt: skip

    first, second = candidate("first"), candidate("second")

    async def scenario() -> None:
        await first._attempt()
        await second._attempt()
        assert (first.leading, second.leading) == (True, False)
        stored = await first.store.read()
        assert stored is not None and stored.holder == "first"
        with pytest.raises(LeaseConflict):  # a write based on an older read loses
            await second.store.write(replace(stored, holder="second", resource_version="1"), create=False)
        with pytest.raises(LeaseConflict):  # and so does a second creation
            await second.store.write(replace(stored, resource_version=None), create=True)
        now[0] += 16  # first is gone: no renewal for longer than the lease
        await second._attempt()
        await first._attempt()  # back, it finds second holding the Lease and stops at once
        assert (first.leading, second.leading) == (False, True)
        lease = json.loads(kubectl(kubeconfig, "get", "lease", "coordinated-operator", "-o", "json").stdout)
        assert lease["spec"]["holderIdentity"] == "second" and lease["spec"]["leaseTransitions"] == 1

    asyncio.run(scenario())
    assert log == ["first leads", "second leads", "first stops"]

    # The chart's Lease: made by helm with no spec and helm's labels, which the election keeps.
    chart_lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"name": "from-the-chart", "labels": {"app.kubernetes.io/managed-by": "Helm"}}}  # fmt: skip
    assert kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(chart_lease)).returncode == 0
    third = LeaderElection(LeaseStore("default", "from-the-chart"), "third", lambda: None, lambda: None)
    asyncio.run(third._attempt())
    assert third.leading
    lease = json.loads(kubectl(kubeconfig, "get", "lease", "from-the-chart", "-o", "json").stdout)
    assert lease["spec"]["holderIdentity"] == "third"
    assert lease["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "Helm"}


def test_a_new_member_of_a_higher_priority_never_preempts_the_others(kubeconfig: Path, scheduler: None) -> None:
    """The trial's outage, scheduled by a real kube-scheduler: two members run on the only node at the default
    priority; the first pod of a roll to the docs' scheduling example (one voter per node, required, and a higher
    priority class) cannot be placed. Under the class as written the scheduler evicts the two others to make room
    (the control); under the operator's non-preempting twin it stays Pending and they keep running."""
    from kubernetes import config

    from coordinated.operator import manifests, placement
    from coordinated.operator.kube import Kube
    from coordinated.operator.spec import ClusterSpec

    config.load_kube_config(config_file=str(kubeconfig))
    high = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 5000}
    assert kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(high)).returncode == 0
    fake_node(kubeconfig, "solo", {"preemption-test": "yes"})
    example = {
        "nodeSelector": {"preemption-test": "yes"},
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {
                            "matchLabels": {"app.kubernetes.io/instance": "demo", "coordinated.dev/voting": "true"}
                        },
                    }
                ]
            }
        },
        "priorityClassName": "high",
    }

    def roll(namespace: str, twin: bool) -> tuple[list[str], dict[str, Any]]:
        """The two members' deletion state and the new pod once the scheduler has judged it."""
        kubectl(kubeconfig, "create", "namespace", namespace)
        kubectl(kubeconfig, "-n", namespace, "create", "serviceaccount", "demo")
        meta = {"name": "demo", "namespace": namespace}
        before = ClusterSpec.from_resource(
            {"metadata": meta, "spec": {"scheduling": {"nodeSelector": example["nodeSelector"]}}}
        )
        members = create_pods_of(kubeconfig, manifests.statefulset(before, 2), namespace)
        placed(kubeconfig, namespace, members)
        after = ClusterSpec.from_resource({"metadata": meta, "spec": {"scheduling": example}})
        found = asyncio.run(Kube().priority_class("high"))
        name, twin_class = placement.pod_priority_class("high", found) if twin else ("high", None)
        if twin_class is not None:
            asyncio.run(Kube().create_if_absent(twin_class))
        new = manifests.statefulset(after, 3, priority_class_name=name)
        template = new["spec"]["template"]
        spec = json.loads(json.dumps(template["spec"]))
        spec["volumes"].append({"name": "data", "emptyDir": {}})
        pod = {"apiVersion": "v1", "kind": "Pod", "spec": spec,
               "metadata": {"name": "demo-2", "namespace": namespace, "labels": template["metadata"]["labels"]}}  # fmt: skip
        assert kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(pod)).returncode == 0

        def judged() -> dict[str, Any] | None:
            got = json.loads(kubectl(kubeconfig, "-n", namespace, "get", "pod", "demo-2", "-o", "json").stdout)
            status = got.get("status") or {}
            refused = any(
                c.get("type") == "PodScheduled" and c.get("status") == "False" for c in status.get("conditions") or ()
            )
            return got if refused or status.get("nominatedNodeName") else None

        wait_until(lambda: judged() is not None, "the scheduler to judge the new pod", timeout=60)
        time.sleep(2)  # a preemption is decided in that same cycle; give its deletions time to land
        evicted = []
        for member in members:
            got = kubectl(kubeconfig, "-n", namespace, "get", "pod", member, "-o", "json")
            if got.returncode != 0 or json.loads(got.stdout)["metadata"].get("deletionTimestamp"):
                evicted.append(member)
        return evicted, judged() or {}

    evicted, pending = roll("as-written", twin=False)
    assert evicted, "the control: the class as written should have preempted the other members"
    kubectl(kubeconfig, "cordon", "solo")  # the control's evicted pods would hold the node: a fresh one
    fake_node(kubeconfig, "solo-2", {"preemption-test": "yes"})
    evicted, pending = roll("twin", twin=True)
    assert evicted == [], "a new member evicted the others"
    assert pending["spec"]["priorityClassName"] == "coordinated-nonpreempting-5000"
    assert pending["spec"]["preemptionPolicy"] == "Never" and pending["spec"]["priority"] == 5000
    assert not pending["status"].get("nominatedNodeName")
    # The scheduler's own word that it did not consider evicting anything for it.
    (scheduled,) = [c for c in pending["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert "preemption: not eligible due to preemptionPolicy=Never" in scheduled["message"], scheduled


def test_each_cluster_gets_its_pod_monitor_from_its_own_resource(kubeconfig: Path) -> None:
    """With the Prometheus Operator's PodMonitor kind served, a cluster's spec.monitoring.podMonitor makes the
    operator apply its PodMonitor (server-side, as the API server takes it) and delete it once turned off: no
    operator upgrade per new cluster, as the chart's list of clusters needed."""
    import kopf
    from kubernetes import config

    from coordinated.operator.config import OperatorConfig
    from coordinated.operator.kube import Kube
    from coordinated.operator.reconcile import driver
    from coordinated.operator.sidecar_client import SidecarConnections

    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "podmonitors.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "names": {"kind": "PodMonitor", "plural": "podmonitors", "singular": "podmonitor"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": True, "storage": True,
                          "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }  # fmt: skip
    assert kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(crd)).returncode == 0
    wait_until(lambda: kubectl(kubeconfig, "get", "podmonitors").returncode == 0, "the PodMonitor kind", timeout=60)
    config.load_kube_config(config_file=str(kubeconfig))
    monitored = {"podMonitor": {"enabled": True, "labels": {"release": "kp"}}}
    assert (
        kubectl(kubeconfig, "apply", "-f", "-", stdin=cluster("watched-by-prometheus", monitoring=monitored)).returncode
        == 0
    )

    async def passes(count: int) -> None:
        async with SidecarConnections() as http:
            memo = kopf.Memo(kube=Kube(), http=http, config=OperatorConfig(pod_monitors=False))
            body = kopf.Body({"metadata": {"namespace": "default", "name": "watched-by-prometheus"}})
            for _ in range(count):
                await driver.reconcile(body, memo, logging.getLogger("test"))

    asyncio.run(passes(2))
    got = kubectl(kubeconfig, "get", "podmonitor", "watched-by-prometheus-sidecars", "-o", "json")
    assert got.returncode == 0, got.stderr
    monitor = json.loads(got.stdout)
    assert monitor["metadata"]["labels"]["release"] == "kp"
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["tlsConfig"]["ca"]["secret"]["name"] == "watched-by-prometheus-certs"
    unmonitored = {"podMonitor": {"enabled": False}}
    assert (
        kubectl(
            kubeconfig, "apply", "-f", "-", stdin=cluster("watched-by-prometheus", monitoring=unmonitored)
        ).returncode
        == 0
    )
    asyncio.run(passes(1))
    assert kubectl(kubeconfig, "get", "podmonitor", "watched-by-prometheus-sidecars").returncode != 0


def test_the_kubernetes_client_answers_many_passes_at_once(kubeconfig: Path) -> None:
    """Passes of several clusters run at once, each API call in a worker thread; the dynamic client's discovery
    (its lazy cache of the API groups) is not thread-safe, and a pass failed on `KeyError: 'resources'` when
    another discovered at the same moment (a ReconcileFailed of its own, seen in this module's status test)."""
    import concurrent.futures

    from kubernetes import config

    from coordinated.operator.kube import Kube

    config.load_kube_config(config_file=str(kubeconfig))
    kinds = [
        ("apps/v1", "StatefulSet"), ("v1", "Service"), ("v1", "ConfigMap"), ("policy/v1", "PodDisruptionBudget"),
        ("batch/v1", "CronJob"), ("networking.k8s.io/v1", "NetworkPolicy"), ("v1", "ServiceAccount"),
        ("monitoring.coreos.com/v1", "PodMonitor"), ("cert-manager.io/v1", "Certificate"),
        ("scheduling.k8s.io/v1", "PriorityClass"),
    ]  # fmt: skip
    failures: list[str] = []
    for _ in range(3):
        kube = Kube()  # a fresh client discovers anew
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            for future in [pool.submit(kube._serves, api, kind) for api, kind in kinds * 3]:
                try:
                    future.result()
                except Exception as error:  # the failure under test, whatever it raises
                    failures.append(repr(error))
    assert failures == [], failures[:3]
