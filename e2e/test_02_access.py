"""Applications in two namespaces with ServiceAccount identities, as docs/operator.md's worked example ("Applications
in other namespaces: ServiceAccount tokens") sets them up, run as written: the cluster `shared` in `coordination`
with spec.access, the CA copied into `shop` and `billing`, and each application's ServiceAccount, projected token
and CA. Each application's pod (the Deployment's pod template, running the project's image and the document's
Python code) authenticates with its projected token and no Secret, writes its own prefix and cannot read nor
write the other's; a token projected for another audience, and one that expired, get 401 with the reason.

The namespaces are the example's own, created here and deleted at the end (with the cluster and its claims)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
import yaml

from e2e.support import IMAGE, REPO, Cluster, apply, kubectl, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

SECTION = "### Applications in other namespaces: ServiceAccount tokens"
NAMESPACES = ("coordination", "shop", "billing")
AUDIENCE = "coordinated.dev/coordination/shared"
URL = "https://shared.coordination.svc:9200"


def example() -> tuple[dict[str, Any], str, list[dict[str, Any]], str]:
    """The worked example's blocks: the cluster, the CA's copy, the applications' objects, their code."""
    section = (REPO / "docs" / "operator.md").read_text().split(SECTION, 1)[1].split("\n### ", 1)[0]
    blocks = {kind: re.findall(rf"```{kind}\n(.*?)```", section, re.S) for kind in ("yaml", "sh", "python")}
    assert [len(blocks[kind]) for kind in ("yaml", "sh", "python")] == [2, 1, 1], blocks
    cluster = yaml.safe_load(blocks["yaml"][0])
    applications = [document for document in yaml.safe_load_all(blocks["yaml"][1]) if document]
    return cluster, blocks["sh"][0], applications, blocks["python"][0]


# What each application's pod runs: the document's code, then what the test checks. Its results go to stdout.
CHECKS = r"""
import http.client, json, os, ssl, subprocess, sys
from coordinated.client import AuthenticationError, Client
result = {}
def raw(token, path):
    conn = http.client.HTTPSConnection("shared.coordination.svc", 9200, timeout=10,
                                       context=ssl.create_default_context(cafile="/etc/coordinated/ca/ca.crt"))
    conn.request("GET", path, headers={"Authorization": "Bearer " + token})
    response = conn.getresponse()
    body = json.loads(response.read() or b"null")
    return [response.status, ((body or {}).get("error") or {}).get("reason")]
with Client.from_env(verify="/etc/coordinated/ca/ca.crt") as client:
    result["whoami"] = client.authenticate()
    own, other = os.environ["OWN_KEY"], os.environ["OTHER_KEY"]
    client.put(own, {"by": result["whoami"]["principal"]})
    result["own"] = client.get(own).value
    for name, call in (("read_other", lambda: client.get(other)), ("write_other", lambda: client.put(other, {}))):
        try:
            call()
            result[name] = "allowed"
        except AuthenticationError as error:
            result[name] = [error.status, error.reason]
for name in ("WRONG_AUDIENCE", "EXPIRED"):
    if os.environ.get(name):
        result[name.lower()] = raw(os.environ[name], "/_security/_authenticate")
cli = subprocess.run(["coordinated", "auth", "whoami", "-o", "json", "--endpoints", os.environ["COORDINATED_URL"],
                      "--cacert", "/etc/coordinated/ca/ca.crt"], capture_output=True, text=True, timeout=60)
result["cli"] = json.loads(cli.stdout)["principal"] if cli.returncode == 0 else cli.stderr
get = subprocess.run(["coordinated", "kv", "get", os.environ["OWN_KEY"], "-o", "json", "--endpoints",
                      os.environ["COORDINATED_URL"], "--cacert", "/etc/coordinated/ca/ca.crt"],
                     capture_output=True, text=True, timeout=60)
result["cli_get"] = json.loads(get.stdout)["value"] if get.returncode == 0 else get.stderr
print("RESULT " + json.dumps(result), flush=True)
"""


def run_pod(pod: dict[str, Any], timeout: float = 240) -> dict[str, Any]:
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    kubectl("-n", namespace, "delete", "pod", name, "--ignore-not-found", "--wait=true", timeout=120)
    apply(pod)
    try:

        def finished() -> str | None:
            phase = kubectl("-n", namespace, "get", "pod", name, "-o", "jsonpath={.status.phase}").stdout
            return phase if phase in ("Succeeded", "Failed") else None

        wait_until(f"pod {namespace}/{name} to finish", finished, timeout=timeout, interval=2)
        logs = kubectl("-n", namespace, "logs", name).stdout
        lines = [line for line in logs.splitlines() if line.startswith("RESULT ")]
        assert lines, f"{name} printed no result: {logs[-3000:]}"
        result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
        return result
    finally:
        kubectl("-n", namespace, "delete", "pod", name, "--wait=false", check=False)


def application_pod(deployment: dict[str, Any], code: str, env: dict[str, str]) -> dict[str, Any]:
    """The Deployment's pod template as one pod: the project's image (never pulled) runs `code`."""
    template = json.loads(json.dumps(deployment["spec"]["template"]))
    spec = template["spec"]
    container = spec["containers"][0]
    container.update(image=IMAGE, imagePullPolicy="Never", command=["python", "-c", code])
    container["env"] = [*container.get("env", []), *({"name": k, "value": v} for k, v in env.items())]
    container["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    spec.update(
        restartPolicy="Never",
        securityContext={"runAsNonRoot": True, "runAsUser": 10001, "seccompProfile": {"type": "RuntimeDefault"}},
    )
    metadata = deployment["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{metadata['name']}-check", "namespace": metadata["namespace"], **template["metadata"]},
        "spec": spec,
    }


def api_server_signing_key() -> Any:
    """The harness's service-account signing key (e2e/.state/pki/sa.key); None on a cluster that is not ours."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    path = Path(os.environ.get("KUBECONFIG", "")).parent / "pki" / "sa.key"
    return load_pem_private_key(path.read_bytes(), password=None) if path.is_file() else None


def expired_copy(token: str, key: Any) -> str:
    """The token the API server issued, as it would have issued it an hour ago for ten minutes."""
    header = jwt.get_unverified_header(token)
    now = int(time.time())
    claims = {**jwt.decode(token, options={"verify_signature": False}), "iat": now - 3600, "nbf": now - 3600}
    claims["exp"] = now - 3000
    return jwt.encode(claims, key, algorithm=header["alg"], headers={"kid": header["kid"]})


@pytest.fixture(scope="module")
def shared(operator_release: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster_document, copy_ca, applications, _ = example()
    for namespace in NAMESPACES:  # an earlier run's first
        kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=true", timeout=300)
    try:
        for namespace in NAMESPACES:
            kubectl("create", "namespace", namespace)
        cluster_document["spec"].update(image=IMAGE, imagePullPolicy="Never")
        apply(cluster_document)
        shared = Cluster("coordination", "shared")
        kubectl("-n", "coordination", "wait", "--for=condition=Ready", "ccl/shared", "--timeout=360s", timeout=380)
        wait_until("spec.access applied", lambda: shared.condition("AccessApplied").get("status") == "True", 120)
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", copy_ca],
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(os.environ),
            cwd=tmp_path_factory.mktemp("ca"),  # where the commands write shared-ca.crt
        )
        assert done.returncode == 0, done.stderr
        for document in applications:
            if document["kind"] == "ServiceAccount":
                apply(document)
        yield shared
    finally:
        for namespace in NAMESPACES:
            kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=true", timeout=300, check=False)


def test_each_application_has_its_own_prefix_and_no_shared_secret(shared: Cluster) -> None:
    _, _, applications, code = example()
    deployments = {
        document["metadata"]["name"]: document for document in applications if document["kind"] == "Deployment"
    }
    status = shared.status()
    assert status["access"]["serviceAccountAudience"] == AUDIENCE
    assert status["access"]["managed"] == {
        "roles": ["billing", "shop"],
        "roleMappings": ["billing", "shop"],
        "quotas": ["shop"],
    }
    keys = shared.condition("ServiceAccountKeys")
    assert keys.get("status") == "True" and "shared-service-account-keys" in keys["message"], keys

    # orders-api runs the document's code (it writes shop/orders/1001), then the checks.
    wrong_audience = kubectl("-n", "shop", "create", "token", "orders-api", "--audience", "vault").stdout.strip()
    env = {"OWN_KEY": "shop/orders/1002", "OTHER_KEY": "billing/invoices/7", "WRONG_AUDIENCE": wrong_audience}
    key = api_server_signing_key()
    if key is not None:
        real = kubectl("-n", "shop", "create", "token", "orders-api", "--audience", AUDIENCE).stdout.strip()
        env["EXPIRED"] = expired_copy(real, key)
    orders = run_pod(application_pod(deployments["orders-api"], code + CHECKS, env))
    assert orders["whoami"]["principal"] == "system:serviceaccount:shop:orders-api", orders
    assert orders["whoami"]["roles"] == ["shop"] and orders["whoami"]["realm"] == "kubernetes"
    assert orders["own"] == {"by": "system:serviceaccount:shop:orders-api"}
    assert orders["read_other"][0] == 403 and orders["write_other"][0] == 403, orders
    assert orders["cli"] == "system:serviceaccount:shop:orders-api", orders
    assert orders["cli_get"] == {"by": "system:serviceaccount:shop:orders-api"}, orders
    status_code, reason = orders["wrong_audience"]
    assert status_code == 401 and 'issued for the audience ["vault"]' in reason, orders

    # invoicer: its own prefix, and not the key orders-api wrote.
    invoicer = run_pod(
        application_pod(
            deployments["invoicer"], CHECKS, {"OWN_KEY": "billing/invoices/7", "OTHER_KEY": "shop/orders/1001"}
        )
    )
    assert invoicer["whoami"]["principal"] == "system:serviceaccount:billing:invoicer", invoicer
    assert invoicer["whoami"]["roles"] == ["billing"]
    assert invoicer["own"] == {"by": "system:serviceaccount:billing:invoicer"}
    assert invoicer["read_other"][0] == 403 and invoicer["write_other"][0] == 403, invoicer
    assert "lacks" in invoicer["read_other"][1] or "read" in invoicer["read_other"][1], invoicer

    if key is None:
        pytest.skip("not the local harness: no API server signing key to make an expired token with")
    status_code, reason = orders["expired"]
    assert status_code == 401 and "expired at" in reason, orders
    logs = "\n".join(
        kubectl("-n", "coordination", "logs", f"shared-{ordinal}", "-c", "sidecar", check=False).stdout
        for ordinal in range(3)
    )
    for token in (wrong_audience, env["EXPIRED"]):
        assert token.split(".")[2] not in logs  # refused tokens are never logged
