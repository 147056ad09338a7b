"""What a certificate may do, with TLS on both ports: a node certificate joins the transport; a client
certificate (for `http.ssl.client_authentication`) from the same CA does not, so it cannot forge a forwarded
request with admin rights; and the roles of the client port hold through any node, forwarded over mutual TLS."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coordinated.coordination.messages import Envelope, ForwardedRequest, encode_envelope
from coordinated.coordination.requests.cluster import UpdateSettings
from coordinated.coordination.settings import SettingsError
from coordinated.sidecar.node_settings import build_config
from coordinated.sidecar.peers.framing import MESSAGE_PATH, STREAM_PATH
from coordinated.sidecar.peers.tls import TrustRestrictions
from coordinated.sidecar.web.privileges import Role
from coordinated.tools.devcerts import Cert, client_context, have_openssl, make_ca, make_cert, make_client_cert
from coordinated.tools.localcluster import LocalCluster, LocalNode, http

ADMIN, WRITER, READER = "admin-token-0123456789", "writer-token-0123456789", "reader-token-0123456789"
TOKENS = f"admin {ADMIN}\nwriter {WRITER}\nreader {READER}\n"
ROLE_TOKENS = {Role.READER: READER, Role.WRITER: WRITER, Role.ADMIN: ADMIN}


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Cert]:
    assert have_openssl(), "needs the openssl command: make test installs it (scripts/system-deps.sh)"
    ca = make_ca(tmp_path / "pki", "cluster-ca")
    certs = {name: make_cert(tmp_path / "pki", ca, name) for name in ("node-a", "node-b", "node-c")}
    certs["app"] = make_client_cert(tmp_path / "pki", ca, "app.example")
    return certs


def tls_settings(cert: Cert, tokens: Path, client_authentication: str = "optional") -> dict[str, str]:
    settings: dict[str, str] = {"http.auth.tokens_file": str(tokens)}
    for prefix in ("transport.ssl", "http.ssl"):
        settings[f"{prefix}.enabled"] = "true"
        settings[f"{prefix}.certificate"] = str(cert.certificate)
        settings[f"{prefix}.key"] = str(cert.key)
        settings[f"{prefix}.certificate_authorities"] = str(cert.ca.certificate)
    settings["http.ssl.client_authentication"] = client_authentication
    settings["transport.ssl.trust_restrictions"] = "node-*"  # the node certificates' common names
    return settings


def test_trust_restrictions_match_names_label_by_label() -> None:
    trust = TrustRestrictions(["*.demo-headless.ns.svc", "10.0.0.7"])
    pod = {"subjectAltName": (("DNS", "demo-0.demo-headless.ns.svc"), ("DNS", "demo"))}
    assert trust.problem(pod) is None
    assert trust.problem({"subjectAltName": (("DNS", "*.demo-headless.ns.svc"),)}) is None  # cert-manager's
    assert trust.problem({"subjectAltName": (("IP Address", "10.0.0.7"),)}) is None
    for other in (
        {"subjectAltName": (("DNS", "a.b.demo-headless.ns.svc"),)},  # one label per `*`
        {"subjectAltName": (("DNS", "demo-headless.ns.svc"),)},
        {"subject": ((("commonName", "app.example"),),)},
        {},
    ):
        problem = trust.problem(other)
        assert problem is not None and "not a node certificate" in problem


def test_client_certificates_of_the_transport_ca_need_trust_restrictions(pki: dict[str, Cert], tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKENS)
    settings = tls_settings(pki["node-a"], tokens, client_authentication="required")

    def build(overrides: dict[str, str]) -> object:
        return build_config(
            name="n", data_dir=str(tmp_path / "d"), host="127.0.0.1", http_port=1, transport_port=2, overrides=overrides
        )

    build(settings)
    without = {name: value for name, value in settings.items() if name != "transport.ssl.trust_restrictions"}
    with pytest.raises(SettingsError, match=re.escape("set [transport.ssl.trust_restrictions]")):
        build(without)
    build({**without, "http.ssl.client_authentication": "none"})  # no client certificates: nothing to tell apart
    with pytest.raises(SettingsError, match="not a name pattern"):
        build({**settings, "transport.ssl.trust_restrictions": "*.*"})


def start(cluster: LocalCluster, pki: dict[str, Cert], tokens: Path, count: int) -> list[LocalNode]:
    names = ["node-a", "node-b", "node-c"][:count]
    for name in names:
        cluster.add(name)
    nodes = [cluster.start(name, names, tls_settings(pki[name], tokens)) for name in names]
    for node in nodes:
        cluster.wait_http(node)
    cluster.wait_master(nodes=count, timeout=40)
    return nodes


@pytest.mark.timeout(180)
def test_a_client_certificate_cannot_act_as_a_node(
    make_cluster: Callable[..., LocalCluster], pki: dict[str, Cert], tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKENS)
    ca = pki["node-a"].ca
    cluster = make_cluster(client_tls=client_context(ca), client_headers={"Authorization": f"Bearer {ADMIN}"})
    start(cluster, pki, tokens, 2)
    master = cluster.wait_master(nodes=2)

    # The client certificate does what it is for: reach the client port (with a token).
    app = client_context(ca, pki["app"])
    status, _ = http("GET", master.url + "/_cluster/health", headers={"Authorization": f"Bearer {READER}"}, context=app)
    assert status == 200

    # A forged forwarded request with admin rights and no token, sent with the client certificate: refused.
    forged = ForwardedRequest("node-x", 1, UpdateSettings({"cluster.publish.timeout": "45s"}), 10_000)
    body = encode_envelope(Envelope("127.0.0.1:1", forged))
    url = f"https://{master.transport_address}"
    status, answer = http("POST", url + MESSAGE_PATH, raw=body, context=app)
    assert status == 403 and "not a node certificate" in answer["error"]["reason"], answer
    status, _ = http("GET", url + STREAM_PATH, context=app)
    assert status == 403
    _, settings = master.get("/_cluster/settings")
    assert "cluster.publish.timeout" not in str(settings)
    # The master names the refusal in its health.
    _, health = master.get("/_cluster/health")
    assert any("not a node certificate" in found["reason"] for found in health["problems"]), health

    # A node certificate is let through (to the handler: a junk body gets 400).
    status, _ = http("POST", url + MESSAGE_PATH, raw=b"{}", context=client_context(ca, pki["node-b"]))
    assert status == 400


# (method, path, body, the role it needs)
ROUTES: list[tuple[str, str, Any, Role]] = [
    ("GET", "/healthz", None, Role.OPEN),
    ("GET", "/readyz", None, Role.OPEN),
    ("GET", "/", None, Role.READER),
    ("GET", "/_cluster/health", None, Role.READER),
    ("GET", "/_cluster/state", None, Role.READER),
    ("GET", "/_cat/master?format=json", None, Role.READER),
    ("GET", "/_cluster/metadata/matrix", None, Role.READER),
    ("GET", "/_cluster/metadata/_watch?prefix=matrix&after_version=0&timeout=1s", None, Role.READER),
    ("GET", "/_history?size=1", None, Role.READER),
    ("GET", "/metrics", None, Role.READER),
    ("PUT", "/_cluster/metadata/matrix", {"v": 1}, Role.WRITER),
    ("DELETE", "/_cluster/metadata/matrix-missing", None, Role.WRITER),
    ("POST", "/_cluster/metadata/_txn", {"success": [{"op": "get", "key": "matrix"}]}, Role.WRITER),
    ("POST", "/_sessions", {"ttl": "10s"}, Role.WRITER),
    ("GET", "/_sessions", None, Role.WRITER),
    ("GET", "/_cluster/settings", None, Role.ADMIN),
    ("PUT", "/_cluster/settings", {"persistent": {"cluster.publish.timeout": "30s"}}, Role.ADMIN),
    ("POST", "/_cluster/voting_config_exclusions?node_names=nobody&timeout=1s", None, Role.ADMIN),
    ("DELETE", "/_cluster/voting_config_exclusions?wait_for_removal=false", None, Role.ADMIN),
    ("GET", "/_hooks", None, Role.ADMIN),
    ("GET", "/_snapshot", None, Role.ADMIN),
]


@pytest.mark.timeout(240)
def test_the_role_matrix_with_tls_on_both_ports(
    make_cluster: Callable[..., LocalCluster], pki: dict[str, Cert], tmp_path: Path
) -> None:
    """Every role against every kind of route, on the master and on a follower (which forwards writes and
    linearizable reads to the master over mutual TLS): below the role 401 (no token) or 403, at or above it
    never."""
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKENS)
    ca = pki["node-a"].ca
    cluster = make_cluster(client_tls=client_context(ca), client_headers={"Authorization": f"Bearer {ADMIN}"})
    nodes = start(cluster, pki, tokens, 3)
    master = cluster.wait_master(nodes=3)
    follower = next(node for node in nodes if node is not master)
    context = client_context(ca)
    wrong: list[str] = []
    for node in (follower, master):
        for method, path, body, needed in ROUTES:
            for role in (None, Role.READER, Role.WRITER, Role.ADMIN):
                headers = {"Authorization": f"Bearer {ROLE_TOKENS[role]}"} if role is not None else {}
                status, _ = http(method, node.url + path, body, headers=headers, context=context, timeout=15)
                if needed is Role.OPEN or (role is not None and role >= needed):
                    ok = status not in (401, 403)
                else:
                    ok = status == (401 if role is None else 403)
                if not ok:
                    wrong.append(f"{node.name} {method} {path} as {role.name if role else 'nobody'}: {status}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.timeout(180)
def test_a_client_certificates_subject_is_a_principal(
    make_cluster: Callable[..., LocalCluster], pki: dict[str, Cert], tmp_path: Path
) -> None:
    """With `http.ssl.client_authentication`, a request with a verified client certificate and no token is made
    as the certificate's subject, whose roles come from role mappings only; a token, if sent, decides instead."""
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKENS)
    ca = pki["node-a"].ca
    cluster = make_cluster(client_tls=client_context(ca), client_headers={"Authorization": f"Bearer {ADMIN}"})
    start(cluster, pki, tokens, 1)
    master = cluster.wait_master(nodes=1)
    app = client_context(ca, pki["app"])

    status, who = http("GET", master.url + "/_security/_authenticate", context=app)
    assert (status, who) == (200, {"principal": "CN=app.example", "realm": "certificate", "roles": [], "admin": False})
    status, _ = http("GET", master.url + "/_cluster/metadata/app/x", context=app)
    assert status == 403
    status, _ = http("GET", master.url + "/_cluster/metadata/app/x", context=client_context(ca))  # no certificate
    assert status == 401
    reader = {"Authorization": f"Bearer {READER}"}
    status, who = http("GET", master.url + "/_security/_authenticate", headers=reader, context=app)
    assert who["principal"] == "reader"  # the token decides

    role = {"keys": [{"prefixes": ["app/"], "privileges": ["read", "write"]}]}
    assert master.put("/_security/role/app", role)[0] == 200
    mapping = {"roles": ["app"], "principals": ["CN=app.example"]}
    assert master.put("/_security/role_mapping/app", mapping)[0] == 200
    status, answer = http("PUT", master.url + "/_cluster/metadata/app/x", {"v": 1}, context=app)
    assert status == 200, answer
    _, key = master.get("/_cluster/metadata/app/x")
    assert key["writer"] == "CN=app.example"
    status, _ = http("PUT", master.url + "/_cluster/metadata/other", {"v": 1}, context=app)
    assert status == 403
