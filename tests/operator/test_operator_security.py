"""Security by default: the built-in CA and pod certificates, their renewal, the token and policy objects,
the pods' hardening, and the operator's TLS + Bearer calls to the sidecars."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import logging
import socket
import ssl
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
import kopf
import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from test_operator_handlers import FakeKube, FakeSidecars

from coordinated.operator import certificates, manifests, security
from coordinated.operator.certificates import KeyPair
from coordinated.operator.observation import PodObservation, StatefulSetObservation
from coordinated.operator.reconcile import driver
from coordinated.operator.reconcile.security import certificate_pods
from coordinated.operator.sidecar_client import MEMBERSHIP_FIELDS, SidecarConnections, sidecar_url
from coordinated.operator.spec import HIBERNATED_VOTERS_ANNOTATION, ClusterSpec
from coordinated.sidecar.peers.tls import TrustRestrictions

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
HOUR = datetime.timedelta(hours=1)


def cluster(**spec: Any) -> ClusterSpec:
    body = {"metadata": {"name": "demo", "namespace": "ns", "uid": "u", "generation": 1}, "spec": spec}
    return ClusterSpec.from_resource(body)


def ca() -> KeyPair:
    return certificates.generate_ca("test CA", NOW, 100 * HOUR)


# ---- certificates ------------------------------------------------------------------------------------
def test_pod_certificate_names_the_pod_and_the_services_not_an_ip() -> None:
    spec = cluster()
    names = manifests.pod_certificate_dns_names(spec, "demo-1")
    pair = certificates.issue(ca(), "demo-1", names, NOW, HOUR)
    san = certificates.dns_names_of(pair.certificate)
    assert "demo-1.demo-headless.ns.svc" in san
    assert "demo-1.demo-headless.ns.svc.cluster.local" in san
    assert {"demo", "demo.ns.svc", "demo-headless.ns.svc"} <= set(san)
    assert not any(name.startswith("demo-0") for name in san)
    certificate = x509.load_pem_x509_certificate(pair.certificate)
    usages = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert {usage.dotted_string for usage in usages} == {"1.3.6.1.5.5.7.3.1", "1.3.6.1.5.5.7.3.2"}
    with pytest.raises(x509.ExtensionNotFound):  # no IP SANs at all: pods are verified by name
        certificate.extensions.get_extension_for_class(x509.IssuerAlternativeName)
    assert (
        certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
            x509.IPAddress
        )
        == []
    )


def test_the_transport_admits_the_pods_certificates_and_no_client_certificate() -> None:
    """The trust restriction the operator sets matches every pod certificate it or cert-manager issues, and not
    a client certificate made from the same CA."""
    spec = cluster(tls={"clientAuthentication": "required"})
    settings = args_settings(pod_spec(spec, manifests.BUILTIN_TLS)["containers"][0])
    trust = TrustRestrictions(settings["transport.ssl.trust_restrictions"].split(","))
    for pod in ("demo-0", "demo-4", *manifests.nonvoter_pod_names(spec, 1)):  # the non-voters' pool too
        names = certificates.dns_names_of(
            certificates.issue(ca(), pod, manifests.pod_certificate_dns_names(spec, pod), NOW, HOUR).certificate
        )
        assert trust.problem({"subjectAltName": tuple(("DNS", name) for name in names)}) is None
    wildcard = {"subjectAltName": tuple(("DNS", name) for name in manifests.wildcard_dns_names(spec))}
    assert trust.problem(wildcard) is None  # cert-manager's one certificate for every pod
    client = {"subject": ((("commonName", "reporting-app"),),), "subjectAltName": (("DNS", "reporting.ns.svc"),)}
    assert trust.problem(client) is not None


def test_renewal_is_due_after_the_fraction_of_the_lifetime() -> None:
    authority, names = ca(), ["a.example"]
    pair = certificates.issue(authority, "a", names, NOW, 10 * HOUR)
    start, end = certificates.validity(pair.certificate)

    def reason(at: datetime.datetime) -> str | None:
        return certificates.renewal_reason(pair.certificate, pair.key, authority.certificate, names, at, 0.5)

    halfway = start + (end - start) / 2
    assert reason(halfway - datetime.timedelta(seconds=1)) is None
    assert (reason(halfway) or "").startswith("due for renewal")


def test_renewal_reasons_for_a_wrong_certificate() -> None:
    authority, other, names = ca(), ca(), ["a.example"]
    pair = certificates.issue(authority, "a", names, NOW, HOUR)
    foreign = certificates.issue(other, "a", names, NOW, HOUR)
    check = certificates.renewal_reason
    assert check(None, None, authority.certificate, names, NOW, 0.5) == "missing"
    assert check(foreign.certificate, foreign.key, authority.certificate, names, NOW, 0.5) == (
        "not issued by the cluster's CA"
    )
    assert check(pair.certificate, foreign.key, authority.certificate, names, NOW, 0.5) == "key does not match"
    assert check(pair.certificate, pair.key, authority.certificate, ["b.example"], NOW, 0.5) == "DNS names changed"
    assert check(b"junk", pair.key, authority.certificate, names, NOW, 0.5) == "unreadable"
    assert check(pair.certificate, pair.key, authority.certificate, names, NOW, 0.5) is None


def test_plan_keeps_good_certificates_and_renews_only_what_is_due() -> None:
    spec, authority = cluster(tls={"certificateLifetime": "10h", "renewalFraction": 0.5}), ca()
    first = security.plan_certificates(spec, authority, {}, ("demo-0", "demo-1", "demo-2"), NOW)
    assert first.changed and [pod for pod, _ in first.issued] == ["demo-0", "demo-1", "demo-2"]
    assert set(first.data) == {"ca.crt", *(f"demo-{i}.{ext}" for i in range(3) for ext in ("crt", "key"))}
    assert first.data["ca.crt"] == authority.certificate and authority.key not in first.data.values()

    again = security.plan_certificates(spec, authority, first.data, ("demo-0", "demo-1", "demo-2"), NOW + HOUR)
    assert not again.changed and again.data == first.data

    # demo-1's certificate is re-issued early (say it was lost); later, only it is still fresh.
    data = dict(first.data)
    del data["demo-1.crt"]
    redone = security.plan_certificates(spec, authority, data, ("demo-0", "demo-1", "demo-2"), NOW + 3 * HOUR)
    assert [pod for pod, _ in redone.issued] == ["demo-1"]
    later = security.plan_certificates(spec, authority, redone.data, ("demo-0", "demo-1", "demo-2"), NOW + 6 * HOUR)
    assert [pod for pod, _ in later.issued] == ["demo-0", "demo-2"]
    assert later.data["demo-1.crt"] == redone.data["demo-1.crt"]

    # Scaled down to two pods: the third pod's files go; scaled up: a new pod gets its own.
    down = security.plan_certificates(spec, authority, later.data, ("demo-0", "demo-1"), NOW + 6 * HOUR)
    assert down.changed and down.removed == ("demo-2",) and "demo-2.key" not in down.data
    up = security.plan_certificates(spec, authority, down.data, ("demo-0", "demo-1", "demo-2", "demo-3"), NOW)
    assert [pod for pod, _ in up.issued] == ["demo-2", "demo-3"]


def _mutual_tls_handshake(server: KeyPair, client: KeyPair, ca_pem: bytes) -> str:
    """A real mutual-TLS handshake on loopback, as two transport peers do; returns the client's view."""
    with tempfile.TemporaryDirectory() as folder:
        paths = {}
        for name, pair in (("server", server), ("client", client)):
            paths[name] = (Path(folder) / f"{name}.crt", Path(folder) / f"{name}.key")
            paths[name][0].write_bytes(pair.certificate)
            paths[name][1].write_bytes(pair.key)
        server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_context.load_cert_chain(*paths["server"])
        server_context.load_verify_locations(cadata=ca_pem.decode())
        server_context.verify_mode = ssl.CERT_REQUIRED
        client_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        client_context.load_cert_chain(*paths["client"])
        client_context.load_verify_locations(cadata=ca_pem.decode())
        client_context.check_hostname = False  # peers verify the chain, as the sidecar's transport does
        listener = socket.create_server(("127.0.0.1", 0))
        listener.settimeout(5)
        errors: list[BaseException] = []

        def serve() -> None:
            try:
                connection, _ = listener.accept()
                with server_context.wrap_socket(connection, server_side=True) as tls:
                    tls.sendall(b"ok")
            except (OSError, ssl.SSLError) as error:
                errors.append(error)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            with (
                socket.create_connection(listener.getsockname(), timeout=5) as raw,
                client_context.wrap_socket(raw) as tls,
            ):
                return tls.recv(2).decode()
        except (OSError, ssl.SSLError) as error:
            return f"refused: {type(error).__name__}"
        finally:
            thread.join(5)
            listener.close()


def test_a_renewed_certificate_and_the_old_one_accept_each_other() -> None:
    # During a rotation one peer may present its new certificate while the other still has the old one.
    # Real TLS checks validity against the wall clock, so these certificates are issued around now.
    now = datetime.datetime.now(datetime.UTC)
    spec = cluster(tls={"certificateLifetime": "10h", "renewalFraction": 0.5})
    authority = certificates.generate_ca("test CA", now - 7 * HOUR, 100 * HOUR)
    pods = ("demo-0", "demo-1")
    old = security.plan_certificates(spec, authority, {}, pods, now - 6 * HOUR).data
    new = security.plan_certificates(spec, authority, old, pods, now).data
    assert new["demo-0.crt"] != old["demo-0.crt"]
    old_0 = KeyPair(old["demo-0.crt"], old["demo-0.key"])
    new_1 = KeyPair(new["demo-1.crt"], new["demo-1.key"])
    assert _mutual_tls_handshake(old_0, new_1, authority.certificate) == "ok"
    assert _mutual_tls_handshake(new_1, old_0, authority.certificate) == "ok"
    # ... whereas a certificate of another CA is refused (the check above can fail).
    stranger_ca = certificates.generate_ca("stranger", now - HOUR, 100 * HOUR)
    stranger = certificates.issue(stranger_ca, "x", ["x"], now, HOUR)
    assert _mutual_tls_handshake(old_0, stranger, authority.certificate).startswith("refused")


def test_durations_and_security_validation() -> None:
    assert certificates.parse_duration("90m") == datetime.timedelta(minutes=90)
    assert certificates.parse_duration("2d") == datetime.timedelta(days=2)
    for bad in ("0h", "h", "5", "1.5h", "-1h"):
        with pytest.raises(ValueError, match="invalid duration"):
            certificates.parse_duration(bad)
    assert security.validate_security(cluster()) == []
    too_short = security.validate_security(cluster(tls={"certificateLifetime": "5m", "renewalFraction": 0.5}))
    assert len(too_short) == 1 and "renewed 150s before they expire" in too_short[0]
    assert security.validate_security(cluster(tls={"certificateLifetime": "10m", "renewalFraction": 0.5})) == []
    assert security.validate_security(cluster(tls={"caLifetime": "1000h"})) == [
        "tls.caLifetime must be at least twice tls.certificateLifetime"
    ]


# ---- manifests ---------------------------------------------------------------------------------------
def args_settings(container: dict[str, Any]) -> dict[str, str]:
    args = container["args"]
    return dict(args[i + 1].split("=", 1) for i, arg in enumerate(args) if arg == "-E")


def pod_spec(spec: ClusterSpec, tls_source: str | None) -> dict[str, Any]:
    spec_: dict[str, Any] = manifests.statefulset(spec, 3, tls_source)["spec"]["template"]["spec"]
    return spec_


def test_pods_run_hardened() -> None:
    pod = pod_spec(cluster(), manifests.BUILTIN_TLS)
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sidecar = pod["containers"][0]
    assert sidecar["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert {"name": "tmp", "mountPath": "/tmp"} in sidecar["volumeMounts"]  # the only writable path besides /data


def test_tls_and_tokens_are_wired_through_settings_and_mounted_secrets() -> None:
    pod = pod_spec(cluster(tls={"clientAuthentication": "optional"}), manifests.BUILTIN_TLS)
    sidecar = pod["containers"][0]
    settings = args_settings(sidecar)
    for port in ("transport", "http"):
        assert settings[f"{port}.ssl.enabled"] == "true"
        assert settings[f"{port}.ssl.certificate"] == "/etc/coordinated/tls/$(POD_NAME).crt"
        assert settings[f"{port}.ssl.key"] == "/etc/coordinated/tls/$(POD_NAME).key"
        assert settings[f"{port}.ssl.certificate_authorities"] == "/etc/coordinated/tls/ca.crt"
    assert settings["http.ssl.client_authentication"] == "optional"
    assert settings["http.auth.tokens_file"] == "/etc/coordinated/tokens/tokens"
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "demo-certs"
    assert volumes["tokens"]["secret"]["secretName"] == "demo-tokens"
    assert "demo-ca" not in str(pod)  # the CA's key never reaches a pod
    assert sidecar["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"


def test_cert_manager_pods_use_its_secret_files() -> None:
    spec = cluster(tls={"issuerRef": {"name": "ca-issuer", "kind": "ClusterIssuer"}, "renewalFraction": 0.5})
    pod = pod_spec(spec, manifests.CERT_MANAGER_TLS)
    settings = args_settings(pod["containers"][0])
    assert settings["transport.ssl.certificate"] == "/etc/coordinated/tls/tls.crt"
    assert {v["name"]: v for v in pod["volumes"]}["tls"]["secret"]["secretName"] == "demo-cert-manager-tls"
    certificate = security.cert_manager_certificate(spec)
    assert certificate["spec"]["issuerRef"] == {
        "name": "ca-issuer",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }
    assert "*.demo-headless.ns.svc" in certificate["spec"]["dnsNames"]
    assert certificate["spec"]["secretName"] == "demo-cert-manager-tls"
    assert certificate["spec"]["duration"] == f"{2160 * 3600}s"
    assert certificate["spec"]["renewBefore"] == f"{1080 * 3600}s"
    assert manifests.tls_source_of(spec, cert_manager_available=False) == manifests.BUILTIN_TLS
    assert manifests.tls_source_of(spec, cert_manager_available=True) == manifests.CERT_MANAGER_TLS


def test_security_off_leaves_the_plain_sidecar() -> None:
    spec = cluster(
        tls={"enabled": False}, auth={"enabled": False}, template={"containers": [{"name": "app", "image": "a"}]}
    )
    assert manifests.tls_source_of(spec, cert_manager_available=True) is None
    pod = pod_spec(spec, None)
    settings = args_settings(pod["containers"][0])
    assert not any(key.startswith(("transport.ssl", "http.ssl", "http.auth")) for key in settings)
    assert {volume["name"] for volume in pod["volumes"]}.isdisjoint({"tls", "tokens"})
    assert pod["containers"][0]["readinessProbe"]["httpGet"]["scheme"] == "HTTP"
    app_env = {entry["name"]: entry for entry in pod["containers"][1]["env"]}
    assert app_env["COORDINATED_URL"]["value"] == "http://$(POD_IP):9200"
    assert "COORDINATED_TOKEN" not in app_env


def test_applications_in_the_pod_use_the_loopback_listener_and_the_client_token() -> None:
    spec = cluster(
        template={"containers": [{"name": "app", "image": "a", "env": [{"name": "COORDINATED_URL", "value": "x"}]}]}
    )
    app = pod_spec(spec, manifests.BUILTIN_TLS)["containers"][1]
    env = {entry["name"]: entry for entry in app["env"]}
    assert env["COORDINATED_URL"]["value"] == "http://127.0.0.1:9200"  # the user's value is replaced
    assert env["COORDINATED_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "demo-client", "key": "token"}


def test_token_secrets_and_the_tokens_file() -> None:
    spec = cluster()
    secret = security.token_secret(spec, "client", "t" * 20)
    assert secret["metadata"]["name"] == "demo-client"
    assert base64.b64decode(secret["data"]["token"]) == b"t" * 20
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "u"
    tokens = security.tokens_file_secret(spec, {"admin": "A" * 20, "client": "C" * 20, "reader": "R" * 20})
    lines = base64.b64decode(tokens["data"]["tokens"]).decode().splitlines()
    assert sorted(lines) == sorted([f"admin {'A' * 20}", f"writer {'C' * 20}", f"reader {'R' * 20}"])


def test_the_audit_job_trusts_the_ca_and_reads_with_the_reader_token() -> None:
    job = manifests.audit_cronjob(cluster(audit={"enabled": True}), 3, manifests.BUILTIN_TLS)
    assert job is not None
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert "https://demo-0.demo-headless.ns.svc:9200" in container["args"][2]
    env = {entry["name"]: entry for entry in container["env"]}
    assert env["COORDINATED_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "demo-reader", "key": "token"}
    assert env["SSL_CERT_FILE"]["value"] == "/etc/coordinated/tls/ca.crt"
    assert container["args"][container["args"].index("--ca-file") + 1] == "/etc/coordinated/tls/ca.crt"
    ca_volume = {volume["name"]: volume for volume in pod["volumes"]}["ca"]
    assert ca_volume["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]  # no pod's private key


def test_network_policy() -> None:
    operator = security.operator_peer("ops", {"app.kubernetes.io/name": "coordinated-cluster-operator"})
    policy = security.network_policy(cluster(), operator)
    assert policy is not None
    transport, client = policy["spec"]["ingress"]
    nodes = {"podSelector": {"matchLabels": manifests.common_labels(cluster())}}
    assert transport == {"from": [nodes], "ports": [{"protocol": "TCP", "port": 9300}]}
    assert client["ports"] == [{"protocol": "TCP", "port": 9200}]
    assert nodes in client["from"] and operator in client["from"]
    assert {"podSelector": {"matchLabels": {"coordinated.dev/client": "demo"}}} in client["from"]
    assert policy["spec"]["podSelector"] == nodes["podSelector"]

    namespace_peer = {"namespaceSelector": {"matchLabels": {"team": "a"}}}
    custom = security.network_policy(cluster(clientAccess=[namespace_peer]), None)
    assert custom is not None
    peers = custom["spec"]["ingress"][1]["from"]
    assert namespace_peer in peers and not any("coordinated.dev/client" in str(peer) for peer in peers)
    closed = security.network_policy(cluster(clientAccess=[]), None)
    assert closed is not None and len(closed["spec"]["ingress"][1]["from"]) == 2  # own pods and audit only
    prometheus = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }
    scraped = security.network_policy(cluster(metricsAccess=[prometheus]), None)
    assert scraped is not None
    peers = scraped["spec"]["ingress"][1]["from"]  # added to the default client peers, not replacing them
    assert prometheus in peers and {"podSelector": {"matchLabels": {"coordinated.dev/client": "demo"}}} in peers
    assert prometheus not in scraped["spec"]["ingress"][0]["from"]  # never the transport port
    assert security.network_policy(cluster(networkPolicy={"enabled": False}), operator) is None
    assert security.operator_peer(None, {"a": "b"}) is None


def test_sidecar_url_scheme() -> None:
    url = sidecar_url("{scheme}://{ip}:{port}", pod="p", ip="10.0.0.1", service="s", namespace="n", scheme="https")
    assert url == "https://10.0.0.1:9200"
    legacy = sidecar_url("http://{ip}:{port}", pod="p", ip="10.0.0.1", service="s", namespace="n", scheme="https")
    assert legacy == "https://10.0.0.1:9200"
    plain = sidecar_url("{scheme}://{ip}:{port}", pod="p", ip="10.0.0.1", service="s", namespace="n")
    assert plain == "http://10.0.0.1:9200"


# ---- the operator over TLS ---------------------------------------------------------------------------
def resource(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "coordinated.dev/v1alpha1",
        "kind": "CoordinatedCluster",
        "metadata": {"name": "demo", "namespace": "ns", "uid": "u", "generation": 1, "annotations": {}},
        "spec": {"replicas": 3, **spec},
    }


def _server_context(certificate: bytes, key: bytes, folder: str) -> ssl.SSLContext:
    Path(folder, "c.crt").write_bytes(certificate)
    Path(folder, "c.key").write_bytes(key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(Path(folder, "c.crt"), Path(folder, "c.key"))
    return context


def _observe_over_tls(kube: FakeKube, certificate: bytes, key: bytes) -> tuple[FakeSidecars, dict[str, Any]]:
    """Runs one reconcile against a fake HTTPS sidecar serving `certificate`; returns it and the status."""
    sidecars = FakeSidecars()
    sidecars.uuid = "uuid-1"

    async def scenario() -> None:
        app = web.Application()
        app.router.add_route("*", "/{pod}/{path:.*}", sidecars.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        with tempfile.TemporaryDirectory() as folder:
            site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=_server_context(certificate, key, folder))
            await site.start()
        port = runner.addresses[0][1]
        template = f"{{scheme}}://127.0.0.1:{port}/{{pod}}"
        try:
            async with SidecarConnections(template) as http:
                memo = kopf.Memo(kube=kube, http=http)
                await driver.reconcile(kopf.Body(kube.stored), memo, logging.getLogger("test"))
        finally:
            await runner.cleanup()

    asyncio.run(asyncio.wait_for(scenario(), timeout=30))
    return sidecars, kube.status


def _secret(kube: FakeKube, name: str) -> dict[str, bytes]:
    return {key: base64.b64decode(value) for key, value in kube.secrets[name].items()}


def test_operator_verifies_the_sidecar_against_the_cluster_ca_and_sends_the_admin_token() -> None:
    kube = FakeKube(resource())
    kube.stored["metadata"]["annotations"]["coordinated.dev/cluster-uuid"] = "uuid-1"
    kube.replicas = 3
    kube.pod_map = {f"demo-{i}": PodObservation(f"demo-{i}", ready=True, ip="127.0.0.1") for i in range(3)}
    # A first pass creates the CA, the certificates and the tokens (no sidecar answers yet).
    _observe_over_tls(kube, *_throwaway_pair())
    certs = _secret(kube, "demo-certs")
    assert {"ca.crt", "demo-0.crt", "demo-0.key", "demo-2.key"} <= set(certs)
    assert "ca.key" in _secret(kube, "demo-ca") and "ca.key" not in certs
    assert "CertificatesIssued" in {reason for reason, _ in kube.events}

    # The sidecars now serve demo-0's certificate: the operator checks it against demo-0's DNS name.
    sidecars, status = _observe_over_tls(kube, certs["demo-0.crt"], certs["demo-0.key"])
    admin = _secret(kube, "demo-admin")["token"].decode()
    assert ("GET", "/demo-0/_cluster/state", {"local": "true", "filter_path": MEMBERSHIP_FIELDS}) in sidecars.requests
    assert not any(path.startswith("/demo-1/") for _, path, _ in sidecars.requests)  # wrong name: refused
    assert sidecars.authorizations == {f"Bearer {admin}"}
    assert status["master"] == "demo-0"  # only demo-0's name matches the certificate; it reports id0 as master
    assert status["health"] == "green"


def _throwaway_pair() -> tuple[bytes, bytes]:
    now = datetime.datetime.now(datetime.UTC)
    pair = certificates.issue(certificates.generate_ca("stranger", now, 100 * HOUR), "x", ["x"], now, HOUR)
    return pair.certificate, pair.key


def test_operator_refuses_a_sidecar_with_a_certificate_of_another_ca() -> None:
    kube = FakeKube(resource())
    kube.replicas = 3
    kube.pod_map = {f"demo-{i}": PodObservation(f"demo-{i}", ready=True, ip="127.0.0.1") for i in range(3)}
    sidecars, status = _observe_over_tls(kube, *_throwaway_pair())
    assert sidecars.requests == []  # the handshake failed before any request
    assert status["master"] is None


def test_cert_manager_fallback_is_reported_once_and_used_when_installed() -> None:
    kube = FakeKube(resource(tls={"issuerRef": {"name": "ca-issuer"}}))
    _observe_over_tls(kube, *_throwaway_pair())
    _observe_over_tls(kube, *_throwaway_pair())
    fallbacks = [message for reason, message in kube.events if reason == "CertManagerNotInstalled"]
    assert len(fallbacks) == 1 and "operator's own CA" in fallbacks[0]
    condition = next(c for c in kube.status["conditions"] if c["type"] == "CertManagerIssuer")
    assert (condition["status"], condition["reason"]) == ("False", "CertManagerNotInstalled")
    assert "demo-certs" in kube.secrets

    kube.cert_manager = True
    kube.applied.clear()
    _observe_over_tls(kube, *_throwaway_pair())
    certificate = next(m for m in kube.applied if m["kind"] == "Certificate")
    assert certificate["spec"]["issuerRef"]["name"] == "ca-issuer"
    condition = next(c for c in kube.status["conditions"] if c["type"] == "CertManagerIssuer")
    assert condition["status"] == "True"


def test_certificates_cover_every_pod_that_may_run_and_ignore_audit_pods() -> None:
    spec = cluster(replicas=3)
    pods = {
        name: PodObservation(name) for name in ("demo-0", "demo-4", "demo-audit-29112-abcde", "demo-audit-29112-x1")
    }
    assert certificate_pods(spec, StatefulSetObservation(2), None, pods) == tuple(f"demo-{i}" for i in range(5))
    assert certificate_pods(spec, StatefulSetObservation(4), None, {}) == tuple(f"demo-{i}" for i in range(4))
    # Non-voters get theirs (the spec's and the StatefulSet's), and hibernated voters keep theirs for waking.
    split = cluster(replicas=5, votingReplicas=3)
    assert certificate_pods(split, None, StatefulSetObservation(3), {}) == (
        *(f"demo-{i}" for i in range(3)),
        *(f"demo-nonvoter-{i}" for i in range(3)),
    )
    body = resource(replicas=0)
    body["metadata"]["annotations"] = {HIBERNATED_VOTERS_ANNOTATION: "3"}
    asleep = ClusterSpec.from_resource(body)
    assert certificate_pods(asleep, StatefulSetObservation(0), None, {}) == ("demo-0", "demo-1", "demo-2")


def test_real_sidecars_run_on_the_operators_files_and_answer_its_calls(
    tmp_path: Path, make_cluster: Callable[..., Any]
) -> None:
    """Three real sidecar processes with the settings, certificates and tokens file the operator builds:
    they form a cluster over mutual TLS, and the operator's client reaches them by IP, checked against each
    pod's DNS name, with the admin token; a wrong name or token is refused."""
    from coordinated.operator.sidecar_client import SidecarAccess, SidecarClient, SidecarError, ca_ssl_context

    spec, now = cluster(), datetime.datetime.now(datetime.UTC)
    pods = ("demo-0", "demo-1", "demo-2")
    authority = certificates.generate_ca("demo CA", now, 100 * HOUR)
    tls_dir, tokens_dir, keys_dir = tmp_path / "tls", tmp_path / "tokens", tmp_path / "service-account-keys"
    tls_dir.mkdir()
    tokens_dir.mkdir()
    keys_dir.mkdir()
    # The API server's signing keys as the operator writes them (its JWKS with its issuer): the ServiceAccount
    # realm is on by default, and a node without its keys reports the problem in its health.
    signing = ec.generate_private_key(ec.SECP256R1())
    jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(signing.public_key()))
    keys = {"issuer": "https://kubernetes.default.svc", "keys": [{**jwk, "kid": "k", "use": "sig", "alg": "ES256"}]}
    (keys_dir / manifests.SERVICE_ACCOUNT_KEYS_KEY).write_text(json.dumps(keys))
    for key, value in security.plan_certificates(spec, authority, {}, pods, now).data.items():
        (tls_dir / key).write_bytes(value)
    tokens = {"admin": "A" * 43, "client": "C" * 43, "reader": "R" * 43}
    tokens_file = base64.b64decode(security.tokens_file_secret(spec, tokens)["data"]["tokens"])
    (tokens_dir / "tokens").write_bytes(tokens_file)

    def node_settings(pod: str) -> dict[str, str]:
        settings = manifests.security_settings(spec, manifests.BUILTIN_TLS)
        return {
            key: value.replace(manifests.TLS_DIR, str(tls_dir))
            .replace(manifests.TOKENS_DIR, str(tokens_dir))
            .replace(manifests.SERVICE_ACCOUNT_KEYS_DIR, str(keys_dir))
            .replace("$(POD_NAME)", pod)
            for key, value in settings.items()
        }

    harness_tls = ca_ssl_context(authority.certificate)
    harness_tls.check_hostname = False  # the harness addresses 127.0.0.1; the operator's client checks names
    local = make_cluster(client_tls=harness_tls, client_headers={"Authorization": "Bearer " + "A" * 43})
    try:
        for pod in pods:
            local.add(pod)
        for pod in pods:
            local.start(pod, list(pods), node_settings(pod))
        for node in local.nodes.values():
            local.wait_http(node)
        local.wait_master(timeout=60, nodes=3)

        async def calls() -> dict[str, Any]:
            results: dict[str, Any] = {}
            context = ca_ssl_context(authority.certificate)
            async with SidecarConnections() as http:

                def client(pod: str, token: str | None, name: str | None = None) -> SidecarClient:
                    node = local.nodes[pod]
                    hostname = manifests.pod_dns_name(spec, name or pod)
                    access = SidecarAccess(token=token, ssl_context=context, server_hostname=hostname)
                    return SidecarClient(http, f"https://127.0.0.1:{node.http_port}", access=access)

                states = [await client(pod, tokens["admin"]).cluster_state() for pod in pods]
                results["masters"] = {state.master for state in states}
                results["health"] = (await client("demo-0", tokens["admin"]).cluster_health()).status
                # An admin-only API, as the operator uses while scaling down.
                await client("demo-1", tokens["admin"]).clear_voting_config_exclusions(wait_for_removal=False)
                for label, failing in (
                    ("wrong name", client("demo-0", tokens["admin"], name="demo-1")),
                    ("no token", client("demo-0", None)),
                    ("writer on admin API", client("demo-0", tokens["client"])),
                ):
                    try:
                        await failing.clear_voting_config_exclusions(wait_for_removal=False)
                        results[label] = "accepted"
                    except SidecarError as error:
                        results[label] = str(error)
            return results

        results = asyncio.run(asyncio.wait_for(calls(), timeout=60))
    finally:
        local.stop_all(graceful=False)
    assert len(results["masters"]) == 1 and results["masters"] <= set(pods), results
    assert results["health"] == "green"
    assert "CERTIFICATE_VERIFY_FAILED" in results["wrong name"] or "hostname" in results["wrong name"], results
    assert "answered 401" in results["no token"], results
    assert "answered 403" in results["writer on admin API"], results
