"""Security by default on the real cluster: the client token lets a pod write and its absence does not; the
NetworkPolicy keeps other pods off both ports; certificates rotate while a writer runs, losing nothing.

The clusters here use the defaults (TLS, tokens and the NetworkPolicy all on), so they need an image whose
sidecar has the TLS and token settings; with an older image the module is skipped, saying so. Applications
are played by short-lived pods of the project's image running a Python script: raw requests with the
standard library where the test needs exact statuses, and the documented client (`coordinated.client`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from e2e.support import (
    IMAGE,
    REPO,
    Cluster,
    apply,
    cluster_manifest,
    kubectl,
    remove_cluster,
    run_spark_submit_audit,
    wait_until,
)


def _sidecar_supports_tokens() -> bool:
    """Whether the source the image is built from has `http.auth.tokens_file` (outside the operator)."""
    for top in REPO.iterdir():
        if top.name in {"operator", "tests", "e2e", ".venv", ".git"} or not top.is_dir():
            continue
        if any("http.auth.tokens_file" in path.read_text(errors="ignore") for path in top.rglob("*.py")):
            return True
    return False


pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(
        not _sidecar_supports_tokens(),
        reason="the image's sidecar has no http.auth.tokens_file / TLS settings yet (the sidecar's security half "
        "is not merged): clusters with security on could not start",
    ),
]

Figure = Callable[[str], None]
CLIENT_LABEL = "coordinated.dev/client"

# Runs in the client pods. MODE=access: what a token does; reach: raw TCP to both ports; write: a writer
# over HTTPS for DURATION seconds that notes each server certificate it sees, then reads every key back.
CLIENT_SCRIPT = r"""
import hashlib, http.client, json, os, socket, ssl, sys, time
mode, host = os.environ["MODE"], os.environ.get("HOST", "")
ctx = ssl.create_default_context(cafile="/ca/ca.crt") if os.path.exists("/ca/ca.crt") else None
seen = set()
def call(method, path, body=None, token=os.environ.get("TOKEN", "")):
    conn = http.client.HTTPSConnection(host, 9200, context=ctx, timeout=6)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    try:
        conn.request(method, path, None if body is None else json.dumps(body), headers)
        seen.add(hashlib.sha256(conn.sock.getpeercert(binary_form=True)).hexdigest())
        response = conn.getresponse()
        response.read()
        return response.status
    except Exception as error:
        return type(error).__name__
    finally:
        conn.close()
if mode == "access":
    result = {
        "writer": call("PUT", "/_cluster/metadata/e2e-token", {"n": 1}),
        "anonymous": call("PUT", "/_cluster/metadata/e2e-anonymous", {"n": 1}, token=""),
        "wrong": call("PUT", "/_cluster/metadata/e2e-anonymous", {"n": 1}, token="not-a-valid-token-at-all"),
        "reader_write": call("PUT", "/_cluster/metadata/e2e-reader", {"n": 1}, token=os.environ["READER"]),
        "reader_read": call("GET", "/_cluster/metadata/e2e-token", token=os.environ["READER"]),
        "writer_settings": call("PUT", "/_cluster/settings", {"persistent": {}}),
    }
    # The documented Python client, as an application in the image would use it: TLS against the CA, the token.
    from coordinated.client import Client, Lock
    with Client(["https://%s:9200" % host], token=os.environ["TOKEN"], verify="/ca/ca.crt") as client:
        client.put("e2e/library", {"from": "coordinated.client"})
        with client.session(ttl=10) as session:
            fencing_token = Lock(client, "e2e/lock", session).acquire(timeout=30)
        result["library"] = [client.get("e2e/library").value, fencing_token > 0]
elif mode == "reach":
    result = {}
    for port in (9200, 9300):
        try:
            socket.create_connection((host, port), timeout=5).close()
            result[str(port)] = "open"
        except OSError as error:
            result[str(port)] = type(error).__name__
elif mode == "write":
    deadline, acknowledged, failures, times = time.time() + float(os.environ["DURATION"]), [], 0, [time.time()]
    enough = int(os.environ.get("ENOUGH_CERTIFICATES", "0")) or None  # stop once this many were served
    n = 0
    while time.time() < deadline and (enough is None or len(seen) < enough):
        status = call("PUT", "/_cluster/metadata/rot-%d" % n, {"n": n})
        if status == 200:
            acknowledged.append(n)
            times.append(time.time())
        else:
            failures += 1
            time.sleep(0.05)
        n += 1
    times.append(time.time())
    missing = [k for k in acknowledged if call("GET", "/_cluster/metadata/rot-%d" % k) != 200]
    gap = max(b - a for a, b in zip(times, times[1:]))
    result = {"acknowledged": len(acknowledged), "failures": failures, "missing": missing,
              "certificates": len(seen), "longest_gap": gap}
print("RESULT " + json.dumps(result), flush=True)
"""


def client_pod(
    namespace: str,
    name: str,
    mode: str,
    host: str,
    cluster: str,
    labels: dict[str, str] | None = None,
    extra_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    env: list[dict[str, Any]] = [{"name": "MODE", "value": mode}, {"name": "HOST", "value": host}]
    env += [{"name": key, "value": value} for key, value in (extra_env or {}).items()]
    env.append({"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": f"{cluster}-client", "key": "token"}}})
    env.append({"name": "READER", "valueFrom": {"secretKeyRef": {"name": f"{cluster}-reader", "key": "token"}}})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "client",
                    "image": IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["python", "-c", CLIENT_SCRIPT],
                    "env": env,
                    "volumeMounts": [{"name": "ca", "mountPath": "/ca", "readOnly": True}],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
            # Only the CA's certificate, as an application gets it; never a pod's key.
            "volumes": [
                {
                    "name": "ca",
                    "secret": {"secretName": f"{cluster}-certs", "items": [{"key": "ca.crt", "path": "ca.crt"}]},
                }
            ],
        },
    }


def run_client(pod: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Starts the pod, waits for it to finish, and returns what its script printed."""
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    kubectl("-n", namespace, "delete", "pod", name, "--ignore-not-found", "--wait=true", timeout=120)
    apply(pod)
    try:

        def finished() -> str | None:
            phase = kubectl("-n", namespace, "get", "pod", name, "-o", "jsonpath={.status.phase}").stdout
            return phase if phase in ("Succeeded", "Failed") else None

        wait_until(f"client pod {name} to finish", finished, timeout=timeout, interval=2)
        logs = kubectl("-n", namespace, "logs", name).stdout
        lines = [line for line in logs.splitlines() if line.startswith("RESULT ")]
        assert lines, f"{name} printed no result: {logs[-2000:]}"
        result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
        return result
    finally:
        kubectl("-n", namespace, "delete", "pod", name, "--wait=false", check=False)


def start_secure_cluster(namespace: str, name: str, replicas: int, **spec: Any) -> Cluster:
    manifest = cluster_manifest(namespace, name, replicas, secure=True)
    manifest["spec"].update(spec)
    apply(manifest)
    kubectl("-n", namespace, "wait", "--for=condition=Ready", f"ccl/{name}", "--timeout=300s", timeout=320)
    return Cluster(namespace, name)


@pytest.fixture(scope="module")
def secured(operator_release: str, namespace: str) -> Iterator[Cluster]:
    yield start_secure_cluster(namespace, "secured", 3)
    remove_cluster(namespace, "secured")


def test_the_client_token_is_needed_and_roles_apply(secured: Cluster) -> None:
    service = f"{secured.name}.{secured.namespace}.svc"
    labels = {CLIENT_LABEL: secured.name}
    result = run_client(client_pod(secured.namespace, "token-client", "access", service, secured.name, labels), 180)
    assert result == {
        "writer": 200,  # the application's token writes, over TLS verified against the cluster's CA
        "anonymous": 401,
        "wrong": 401,
        "reader_write": 403,
        "reader_read": 200,
        "writer_settings": 403,  # the settings API is admin-only
        "library": [{"from": "coordinated.client"}, True],  # the image runs the documented client
    }, result


def test_the_audit_runs_with_spark_submit_against_the_secured_cluster(secured: Cluster, figure: Figure) -> None:
    """spark-submit.sh with its defaults: https verified against the cluster's CA, the reader token, and the
    NetworkPolicy's client label; the sidecars refuse anything less (the test above)."""
    audit = run_spark_submit_audit(secured, 3)
    args = " ".join(audit.driver.spec.containers[0].args or [])
    assert "https://secured-0.secured-headless" in args and "--ca-file /etc/coordinated/tls/ca.crt" in args, args
    # Only the CA's certificate reaches the driver, never the pods' keys of the same Secret.
    secret_volumes = [volume.secret for volume in audit.driver.spec.volumes if volume.secret is not None]
    secret_volumes = [secret for secret in secret_volumes if secret.secret_name == "secured-certs"]
    assert [(item.key, item.path) for secret in secret_volumes for item in secret.items or []] == [
        ("ca.crt", "ca.crt")
    ], secret_volumes
    token = next(env for env in audit.driver.spec.containers[0].env if env.name == "COORDINATED_TOKEN")
    assert (token.value_from.secret_key_ref.name, token.value_from.secret_key_ref.key) == ("secured-reader", "token")
    report = audit.report
    assert report["ok"] is True, report["violations"][:5]
    assert report["nodes"] == 3
    assert report["malformed_lines"] == 0
    figure(f"audit (spark-submit, TLS and token, 1 executor): {report['events']} events, ok, {audit.elapsed:.0f} s")


def _network_policy_enforced(namespace: str) -> bool:
    """A canary: a listening pod that a probe reaches first without a policy, then under a deny-all NetworkPolicy.

    Reached both times means the network plugin ignores policies. Not reached the first time is a broken canary
    (an error, never a skip), so a pod that is merely not listening cannot pass for enforcement."""
    canary = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "np-canary", "namespace": namespace, "labels": {"e2e-canary": "np"}},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["python", "-m", "http.server", "9200", "--directory", "/tmp"],
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "allowPrivilegeEscalation": False},
                    # Ready only once it listens (the kubelet's probe comes from the node, which policies admit).
                    "readinessProbe": {"tcpSocket": {"port": 9200}, "periodSeconds": 1},
                }
            ]
        },
    }
    deny = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "np-canary", "namespace": namespace},
        "spec": {"podSelector": {"matchLabels": {"e2e-canary": "np"}}, "policyTypes": ["Ingress"]},
    }
    apply(canary)
    try:
        kubectl("-n", namespace, "wait", "--for=condition=Ready", "pod/np-canary", "--timeout=120s", timeout=130)
        ip = kubectl("-n", namespace, "get", "pod", "np-canary", "-o", "jsonpath={.status.podIP}").stdout
        before = run_client(client_pod(namespace, "np-canary-open", "reach", ip, "secured"), 120)
        assert before["9200"] == "open", f"the canary is unreachable even without a policy: {before}"
        apply(deny)
        after = run_client(client_pod(namespace, "np-canary-denied", "reach", ip, "secured"), 120)
        return after["9200"] != "open"
    finally:
        kubectl("-n", namespace, "delete", "pod", "np-canary", "--wait=false", check=False)
        kubectl("-n", namespace, "delete", "networkpolicy", "np-canary", check=False)


def _client_port_peer_labels(cluster: Cluster, component: str) -> dict[str, str]:
    """The pod labels of the cluster's NetworkPolicy peer on the client port for `component` (e.g. the audit job)."""
    policy = json.loads(kubectl("-n", cluster.namespace, "get", "networkpolicy", cluster.name, "-o", "json").stdout)
    for rule in policy["spec"]["ingress"]:
        if any(port.get("port") == 9200 for port in rule.get("ports", [])):
            for peer in rule["from"]:
                labels: dict[str, str] = peer.get("podSelector", {}).get("matchLabels", {})
                if labels.get("app.kubernetes.io/component") == component and "namespaceSelector" not in peer:
                    return labels
    raise AssertionError(f"no {component} peer on port 9200 in the NetworkPolicy: {policy['spec']}")


def test_a_pod_outside_the_network_policy_reaches_neither_port(secured: Cluster) -> None:
    if not _network_policy_enforced(secured.namespace):
        pytest.skip("this cluster's network plugin does not enforce NetworkPolicy (a deny-all canary was reachable)")
    # The cluster became Ready under its policy: its pods reach each other's transport, and the operator (a pod
    # admitted on 9200) reaches the sidecars.
    pod_host = f"{secured.name}-0.{secured.name}-headless.{secured.namespace}.svc"
    outsider = run_client(client_pod(secured.namespace, "outsider", "reach", pod_host, secured.name), 120)
    # Dropped (a timeout) or rejected, depending on the network plugin; never open.
    assert "open" not in outsider.values(), outsider
    # The controls: the same probe from an admitted client pod, and from a pod labelled as the cluster's audit
    # job, reaches the client port, not the transport.
    labels = {CLIENT_LABEL: secured.name}
    insider = run_client(client_pod(secured.namespace, "insider", "reach", pod_host, secured.name, labels), 120)
    assert insider["9200"] == "open" and insider["9300"] != "open", insider
    audit_labels = _client_port_peer_labels(secured, "audit")
    audit = run_client(client_pod(secured.namespace, "audit-like", "reach", pod_host, secured.name, audit_labels), 120)
    assert audit["9200"] == "open" and audit["9300"] != "open", audit


def test_certificates_rotate_while_a_writer_runs(operator_release: str, namespace: str, figure: Figure) -> None:
    # Renewed after a tenth of a 210 s lifetime: every certificate is replaced 21 s after issue, and the 189 s
    # left (the operator asks at least 180) cover the kubelet's projection of the Secret (10 s in the harness).
    tls = {"certificateLifetime": "210s", "renewalFraction": 0.1}
    cluster = start_secure_cluster(namespace, "rotating", 3, tls=tls)
    restarts_before = {pod.metadata.name: pod.status.container_statuses[0].restart_count for pod in cluster.pods()}
    certs_before = kubectl("-n", namespace, "get", "secret", "rotating-certs", "-o", "jsonpath={.data}").stdout
    writer = client_pod(
        namespace,
        "rotation-writer",
        "write",
        f"rotating.{namespace}.svc",
        "rotating",
        labels={CLIENT_LABEL: "rotating"},
        # Until a renewed certificate was served (more distinct ones than pods), at most 3 minutes.
        extra_env={"DURATION": "180", "ENOUGH_CERTIFICATES": "4"},
    )
    started = time.monotonic()
    result = run_client(writer, 400)
    renewals = [event.message for event in cluster.events("CertificatesIssued") if "due for renewal" in event.message]
    certs_after = kubectl("-n", namespace, "get", "secret", "rotating-certs", "-o", "jsonpath={.data}").stdout
    assert renewals and certs_after != certs_before, "the operator renewed no certificate during the run"
    assert result["acknowledged"] > 0 and result["missing"] == [], result
    # More distinct server certificates than pods: the sidecars served the renewed files, without a restart.
    assert result["certificates"] > 3, result
    restarts_after = {pod.metadata.name: pod.status.container_statuses[0].restart_count for pod in cluster.pods()}
    assert restarts_after == restarts_before
    assert cluster.status().get("phase") == "Ready"
    figure(
        f"certificate rotation under writes ({time.monotonic() - started:.0f} s): {result['acknowledged']} writes "
        f"acknowledged, none lost, {result['failures']} failed, longest gap {result['longest_gap']:.2f} s"
    )
    remove_cluster(namespace, "rotating")
