"""The operator's PodMonitor for a cluster with TLS and tokens (monitoring.py), scraped for real: its endpoint is turned into the
Prometheus scrape config the Prometheus Operator generates from it (scheme, CA, server name, bearer token),
and a real Prometheus (Debian's package) scrapes a real sidecar serving the certificate the operator issues
to a pod, with tokens on. Only the PodMonitor's settings get through; without the token or with another
server name the scrape fails."""

from __future__ import annotations

import datetime
import json
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from required_commands import require_command

from coordinated.operator import certificates, manifests, monitoring
from coordinated.operator.spec import ClusterSpec
from coordinated.tools.localcluster import LocalCluster, free_ports

pytestmark = [
    pytest.mark.timeout(180),
]

ADMIN, READER = "admin-token-0123456789", "reader-token-0123456789"
LIFETIME = datetime.timedelta(hours=2)


def secured_endpoint() -> tuple[dict[str, Any], dict[str, Any]]:
    """The endpoint of the PodMonitor the operator makes for the cluster `orders` in `shop` (TLS from its own
    CA, tokens on: the defaults), and the PodMonitor."""
    spec = ClusterSpec.from_resource({"metadata": {"name": "orders", "namespace": "shop", "uid": "u"}, "spec": {}})
    monitor = monitoring.pod_monitor(spec, manifests.BUILTIN_TLS)
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    return endpoint, monitor


def scrape_config(endpoint: dict[str, Any], secrets: dict[tuple[str, str], Path], target: str) -> dict[str, Any]:
    """What the Prometheus Operator makes of a PodMonitor endpoint (the fields this chart sets), with the
    Secrets' keys as files and a static target in place of the pod discovery."""
    config: dict[str, Any] = {
        "job_name": "sidecar",
        "scheme": endpoint.get("scheme", "http"),
        "metrics_path": endpoint["path"],
        "scrape_interval": "1s",
        "scrape_timeout": "1s",
        "static_configs": [{"targets": [target]}],
    }
    tls = endpoint.get("tlsConfig")
    if tls:
        ca = tls["ca"]["secret"]
        config["tls_config"] = {"ca_file": str(secrets[(ca["name"], ca["key"])]), "server_name": tls["serverName"]}
    auth = endpoint.get("authorization")
    if auth:
        credentials = auth["credentials"]
        config["authorization"] = {
            "type": auth["type"],
            "credentials_file": str(secrets[(credentials["name"], credentials["key"])]),
        }
    return config


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[tuple[str, str], Path]]]:
    """A sidecar serving the operator's certificate for the pod orders-0, tokens on; its address and the
    Secrets (`orders-certs`/ca.crt, `orders-reader`/token) as files."""
    require_command("prometheus", "scripts/system-deps.sh test (Debian's prometheus package)")
    tmp = tmp_path_factory.mktemp("scrape")
    spec = ClusterSpec.from_resource({"metadata": {"name": "orders", "namespace": "shop", "uid": "u"}, "spec": {}})
    now = datetime.datetime.now(datetime.UTC)
    ca = certificates.generate_ca("orders CA", now, LIFETIME)
    pod = certificates.issue(ca, "orders-0", manifests.pod_certificate_dns_names(spec, "orders-0"), now, LIFETIME)
    files = {name: tmp / name for name in ("ca.crt", "tls.crt", "tls.key", "tokens", "reader")}
    files["ca.crt"].write_bytes(ca.certificate)
    files["tls.crt"].write_bytes(pod.certificate)
    files["tls.key"].write_bytes(pod.key)
    files["tokens"].write_text(f"admin {ADMIN}\nreader {READER}\n")
    files["reader"].write_text(READER)
    client = ssl.create_default_context(cadata=ca.certificate.decode())
    client.check_hostname = False  # the harness reaches it by IP; Prometheus checks the name below
    cluster = LocalCluster(tmp / "cluster", client_tls=client, client_headers={"Authorization": f"Bearer {ADMIN}"})
    node = cluster.add("orders-0")
    node.host = "127.0.0.2"  # 127.0.0.1 is the node's plain loopback listener
    settings = {
        "http.ssl.enabled": "true",
        "http.ssl.certificate": str(files["tls.crt"]),
        "http.ssl.key": str(files["tls.key"]),
        "http.auth.tokens_file": str(files["tokens"]),
    }
    cluster.start("orders-0", ["orders-0"], settings)
    try:
        cluster.wait_http(node)
        cluster.wait_master(nodes=1)
        yield (
            f"127.0.0.2:{node.http_port}",
            {("orders-certs", "ca.crt"): files["ca.crt"], ("orders-reader", "token"): files["reader"]},
        )
    finally:
        cluster.stop_all(graceful=True)


def scrape_health(tmp_path: Path, config: dict[str, Any]) -> dict[str, Any]:
    """Run Prometheus with one scrape config until its target has been scraped; the target's health."""
    (port,) = free_ports(1)
    (tmp_path / "prometheus.yml").write_text(json.dumps({"scrape_configs": [config]}))
    log = (tmp_path / "prometheus.log").open("wb")
    process = subprocess.Popen(
        ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/targets", timeout=2) as response:
                    (target,) = json.load(response)["data"]["activeTargets"]
                if target["health"] != "unknown":
                    return dict(target)
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        raise AssertionError("Prometheus did not scrape its target")
    finally:
        process.terminate()
        process.wait(15)


def test_prometheus_scrapes_a_secured_sidecar_with_the_pod_monitors_settings(
    sidecar: tuple[str, dict[tuple[str, str], Path]], tmp_path: Path
) -> None:
    address, secrets = sidecar
    endpoint, _ = secured_endpoint()
    health = scrape_health(tmp_path, scrape_config(endpoint, secrets, address))
    assert health["health"] == "up", health["lastError"]


def test_without_the_token_the_scrape_is_refused(
    sidecar: tuple[str, dict[tuple[str, str], Path]], tmp_path: Path
) -> None:
    address, secrets = sidecar
    endpoint, _ = secured_endpoint()
    endpoint.pop("authorization")
    health = scrape_health(tmp_path, scrape_config(endpoint, secrets, address))
    assert health["health"] == "down" and "401" in health["lastError"], health


def test_the_server_name_is_checked(sidecar: tuple[str, dict[tuple[str, str], Path]], tmp_path: Path) -> None:
    address, secrets = sidecar
    endpoint, _ = secured_endpoint()
    endpoint["tlsConfig"]["serverName"] = "orders.elsewhere.svc"
    health = scrape_health(tmp_path, scrape_config(endpoint, secrets, address))
    assert health["health"] == "down" and "certificate" in health["lastError"], health


def test_the_sidecar_exports_its_own_certificates_expiry(sidecar: tuple[str, dict[tuple[str, str], Path]]) -> None:
    """What the expiry alert reads, from the sidecar itself: it holds while no operator runs."""
    from cryptography import x509

    address, secrets = sidecar
    context = ssl.create_default_context(cadata=secrets[("orders-certs", "ca.crt")].read_text())
    context.check_hostname = False
    request = urllib.request.Request(f"https://{address}/metrics", headers={"Authorization": f"Bearer {READER}"})
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        text = response.read().decode()
    (line,) = [
        line for line in text.splitlines() if line.startswith("coordinated_tls_certificate_expiry_timestamp_seconds{")
    ]
    served = ssl.get_server_certificate(tuple(address.rsplit(":", 1)))  # type: ignore[arg-type]
    expected = x509.load_pem_x509_certificate(served.encode()).not_valid_after_utc.timestamp()
    assert 'kind="certificate"' in line and 'port="http"' in line
    assert float(line.rsplit(" ", 1)[1]) == expected
