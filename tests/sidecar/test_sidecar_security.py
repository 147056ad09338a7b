"""Security on real node processes: tokens and roles, the loopback listener, TLS on both ports, mutual TLS
between nodes, and certificates and tokens reloaded from disk."""

from __future__ import annotations

import os
import re
import shutil
import socket
import ssl
import threading
import time
import urllib.error
from collections.abc import Callable
from http.client import HTTPException
from pathlib import Path
from typing import Any

import pytest
from route_lookup import required_role

from coordinated.coordination.settings import SettingsError
from coordinated.sidecar.node_settings import build_config, sidecar_registry
from coordinated.sidecar.peers.tls import ReloadingContext
from coordinated.sidecar.peers.tls_settings import Side, TlsFiles
from coordinated.sidecar.web.privileges import Role
from coordinated.tools.devcerts import Cert, client_context, have_openssl, make_ca, make_cert
from coordinated.tools.localcluster import LocalCluster, LocalNode, http

ADMIN, WRITER, READER = "admin-token-0123456789", "writer-token-0123456789", "reader-token-0123456789"
TOKENS = f"# roles\nadmin {ADMIN}\nwriter {WRITER}\nreader {READER}\n"


def require_openssl() -> None:
    assert have_openssl(), "needs the openssl command: make test installs it (scripts/system-deps.sh)"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def tls_settings(prefix: str, cert: Cert, with_ca: bool = True) -> dict[str, str]:
    settings = {
        f"{prefix}.enabled": "true",
        f"{prefix}.certificate": str(cert.certificate),
        f"{prefix}.key": str(cert.key),
    }
    if with_ca:
        settings[f"{prefix}.certificate_authorities"] = str(cert.ca.certificate)
    return settings


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting until {what}")


def config(**overrides: str) -> object:
    return build_config(
        name="n1", data_dir="/tmp/x", host="127.0.0.1", http_port=1, transport_port=2, overrides=overrides
    )


# -- settings ---------------------------------------------------------------------------------------------


def test_security_settings_are_checked_at_startup_and_static(tmp_path: Path, openssl: str) -> None:
    require_openssl()
    ca = make_ca(tmp_path, "ca")
    cert, other = make_cert(tmp_path, ca, "n1"), make_cert(tmp_path, ca, "n2")
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKENS)
    good = {
        **tls_settings("transport.ssl", cert),
        **tls_settings("http.ssl", cert),
        "http.auth.tokens_file": str(tokens),
    }
    config(**good)  # loads
    bad_tokens = tmp_path / "bad-tokens"
    bad_tokens.write_text(f"superuser {ADMIN}\n")
    cases = [
        ({"transport.ssl.enabled": "true"}, "setting [transport.ssl.certificate] is required"),
        ({**tls_settings("transport.ssl", cert), "transport.ssl.key": ""}, "transport.ssl.key"),
        ({**tls_settings("transport.ssl", cert, with_ca=False)}, "[transport.ssl.certificate_authorities] is required"),
        ({**tls_settings("http.ssl", cert), "http.ssl.certificate": "/nonexistent.crt"}, "http.ssl.certificate"),
        ({**tls_settings("http.ssl", cert), "http.ssl.key": str(other.key)}, "do not load"),
        ({"http.ssl.client_authentication": "sometimes"}, "http.ssl.client_authentication"),
        (
            {**tls_settings("http.ssl", cert, with_ca=False), "http.ssl.client_authentication": "required"},
            "[http.ssl.certificate_authorities] is required",
        ),
        ({"http.auth.tokens_file": str(bad_tokens)}, "unknown role [superuser]"),
        ({"http.auth.tokens_file": str(tmp_path / "missing")}, "http.auth.tokens_file"),
    ]
    for overrides, message in cases:
        with pytest.raises(SettingsError, match=re.escape(message)):
            config(**overrides)
    for name in ("transport.ssl.enabled", "http.ssl.certificate", "http.auth.tokens_file"):
        with pytest.raises(SettingsError, match="not dynamically updateable"):
            sidecar_registry().validate_dynamic({name: "x"})


def test_route_table() -> None:
    assert required_role("GET", "/healthz") is Role.OPEN
    assert required_role("GET", "/readyz") is Role.OPEN
    assert required_role("GET", "/metrics") is Role.READER
    assert required_role("GET", "/_cluster/metadata/_watch") is Role.READER
    assert required_role("PUT", "/_cluster/metadata/locks/a") is Role.WRITER
    assert required_role("POST", "/_cluster/metadata/_txn") is Role.WRITER
    assert required_role("GET", "/_cluster/metadata") is Role.READER  # a range read
    assert required_role("DELETE", "/_cluster/metadata") is Role.WRITER  # a prefix delete
    assert required_role("POST", "/_sessions") is Role.WRITER
    # Sessions are a writer's, their listing included.
    assert required_role("GET", "/_sessions") is Role.WRITER
    assert required_role("PUT", "/_sessions/abc/_keepalive") is Role.WRITER
    assert required_role("DELETE", "/_sessions/abc") is Role.WRITER
    assert required_role("GET", "/_cluster/settings") is Role.ADMIN
    assert required_role("PUT", "/_snapshot/r/s") is Role.ADMIN
    assert required_role("GET", "/_hooks") is Role.ADMIN
    assert required_role("POST", "/_some/new/api") is Role.ADMIN  # no route: closed
    assert required_role("POST", "/_cluster/metadata/a") is Role.ADMIN  # a method no route takes: closed too
    assert required_role("PUT", "/_cluster/metadata/%7Bkey%7D/a%2Fb") is Role.WRITER
    assert required_role("DELETE", "/_hooks/h") is Role.ADMIN


# -- tokens, roles and the loopback listener on a real node ---------------------------------------------


def start_nodes(
    cluster: LocalCluster, settings_of: Callable[[int], dict[str, str]], count: int, host: str = "127.0.0.1"
) -> list[LocalNode]:
    names = [f"node-{i}" for i in range(len(cluster.nodes) + 1, len(cluster.nodes) + count + 1)]
    for name in names:
        cluster.add(name).host = host
    nodes = [cluster.start(name, names, settings_of(i)) for i, name in enumerate(names)]
    for node in nodes:
        cluster.wait_http(node)
    return nodes


def test_tokens_roles_and_loopback_listener(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    require_openssl()
    ca = make_ca(tmp_path / "pki", "ca")
    cert = make_cert(tmp_path / "pki", ca, "n1")
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKENS)
    cluster = make_cluster(client_tls=client_context(ca), client_headers=bearer(ADMIN))
    settings = {**tls_settings("http.ssl", cert, with_ca=False), "http.auth.tokens_file": str(tokens)}
    # Published on 127.0.0.2 (not 127.0.0.1): the node also serves plain HTTP on 127.0.0.1.
    (node,) = start_nodes(cluster, lambda _: settings, 1, host="127.0.0.2")
    cluster.wait_master(nodes=1)
    context = client_context(ca)

    def call(method: str, path: str, token: str | None, body: Any = None, url: str | None = None) -> int:
        status, answer = http(
            method,
            (url or node.url) + path,
            body,
            headers=bearer(token) if token else None,
            context=None if url else context,
        )
        if status in (401, 403):
            assert answer["error"]["type"] == "security_exception" and answer["status"] == status
        return status

    # No token, or an unknown one: 401, for reads and writes alike.
    assert call("GET", "/_cluster/state", None) == 401
    assert call("PUT", "/_cluster/metadata/k", None, {"v": 1}) == 401
    assert call("PUT", "/_cluster/metadata/k", "not-a-token-0123456789", {"v": 1}) == 401
    assert call("GET", "/metrics", None) == 401
    # Open: the probes.
    assert call("GET", "/healthz", None) == 200 and call("GET", "/readyz", None) == 200
    # A reader reads and watches, but cannot write.
    assert call("PUT", "/_cluster/metadata/k", READER, {"v": 1}) == 403
    assert call("DELETE", "/_cluster/metadata/k", READER) == 403
    assert call("GET", "/_cluster/health", READER) == 200
    assert call("GET", "/metrics", READER) == 200
    # A writer writes and reads, but the admin APIs are closed to it.
    assert call("PUT", "/_cluster/metadata/k", WRITER, {"v": 1}) == 200
    assert call("GET", "/_cluster/metadata/k", READER) == 200
    assert call("PUT", "/_cluster/settings", WRITER, {"persistent": {"cluster.no_master_block": "all"}}) == 403
    assert call("GET", "/_cluster/settings", WRITER) == 403
    assert call("POST", "/_cluster/voting_config_exclusions?node_names=node-1", WRITER) == 403
    assert call("DELETE", "/_cluster/voting_config_exclusions", WRITER) == 403
    hook = {"url": "http://127.0.0.1:9/hook"}
    assert call("PUT", "/_hooks/h", WRITER, hook) == 403
    assert call("GET", "/_hooks", WRITER) == 403
    repository = {"type": "fs", "settings": {"location": str(tmp_path / "backups")}}
    for method, path in (
        ("PUT", "/_snapshot/r"),
        ("GET", "/_snapshot"),
        ("PUT", "/_snapshot/r/s?wait_for_completion=true"),
        ("GET", "/_snapshot/r/_all"),
        ("DELETE", "/_snapshot/r/s"),
        ("POST", "/_snapshot/r/s/_restore"),
    ):
        assert call(method, path, WRITER, repository if path == "/_snapshot/r" else None) == 403, path
    # Escapes do not change the role: it is the handler's that runs (here none: 403 to the writer, 404 to the
    # admin), and a key with an escaped slash is a key.
    assert call("PUT", "/_cluster%2Fsettings", WRITER, {"persistent": {}}) == 403
    assert call("PUT", "/_cluster/metadata/a%2Fb", WRITER, {"v": 1}) == 200
    # The admin may do all of it.
    assert call("PUT", "/_cluster/settings", ADMIN, {"persistent": {"cluster.no_master_block": "all"}}) == 200
    assert call("GET", "/_hooks", ADMIN) == 200
    assert call("GET", "/_snapshot", ADMIN) == 200
    assert call("PUT", "/_snapshot/r", ADMIN, repository) == 400  # the handler's answer: no path.repo here
    assert call("GET", "/_snapshot/r/_all", ADMIN) == 404  # repository_missing_exception
    assert call("PUT", "/_cluster/metadata/k", ADMIN, {"v": 2}) == 200

    # Refusals are counted in the request metrics.
    _, metrics = http("GET", node.url + "/metrics", headers=bearer(READER), context=context)
    for status in (401, 403):
        match = re.search(rf'coordinated_http_requests_total{{status="{status}"}} (\S+)', metrics)
        assert match is not None and float(match.group(1)) >= 1, status

    # The loopback listener: plain HTTP on 127.0.0.1, the same tokens.
    loopback = f"http://127.0.0.1:{node.http_port}"
    assert call("GET", "/_cluster/metadata/k", None, url=loopback) == 401
    assert call("PUT", "/_cluster/metadata/k", READER, {"v": 3}, url=loopback) == 403
    assert call("GET", "/_cluster/metadata/k", READER, url=loopback) == 200

    # Plain HTTP on the TLS port is refused with a 400 that says to use https (it used to be a bare close),
    # whatever the request, and the port still speaks TLS afterwards.
    for method, path in (("GET", "/healthz"), ("PUT", "/_cluster/metadata/k")):
        status, answer = http(method, f"http://127.0.0.2:{node.http_port}{path}", {"v": 9}, timeout=5)
        assert status == 400, answer
        assert answer["error"]["type"] == "bad_request_exception"
        assert (
            f"this port speaks HTTPS only: send the request to https://<host>:{node.http_port}/"
            in (answer["error"]["reason"])
        )
    assert call("GET", "/_cluster/metadata/k", READER) == 200
    # A client that connects and leaves without a byte costs nothing and breaks nothing.
    socket.create_connection(("127.0.0.2", node.http_port), timeout=5).close()
    assert call("GET", "/healthz", None) == 200

    # The tokens file is re-read when it changes: a new token works, a removed one no longer does.
    newcomer = "newcomer-token-0123456789"
    replacement = tmp_path / "tokens.new"
    replacement.write_text(f"admin {ADMIN}\nwriter {newcomer}\n")
    os.replace(replacement, tokens)
    wait_until(lambda: call("PUT", "/_cluster/metadata/k", newcomer, {"v": 4}) == 200, 10, "the new token works")
    assert call("GET", "/_cluster/health", READER) == 401
    # Fail closed: a broken file, or none, revokes every token; /readyz (open) says why. A good file brings
    # them back.
    broken = tmp_path / "tokens.broken"
    broken.write_text("nonsense\n")
    os.replace(broken, tokens)
    wait_until(lambda: call("PUT", "/_cluster/metadata/k", newcomer, {"v": 5}) == 401, 10, "a broken file revokes")
    assert call("GET", "/_cluster/health", ADMIN) == 401
    status, ready = http("GET", node.url + "/readyz", context=context)
    assert status == 503 and "tokens_file" in ready["reason"] and "every token is refused" in ready["reason"]
    tokens.unlink()
    time.sleep(1.5)  # past the reload check interval, so that the missing file has been looked at
    assert call("PUT", "/_cluster/metadata/k", newcomer, {"v": 5}) == 401
    assert call("GET", "/_cluster/metadata/k", READER, url=loopback) == 401
    replacement.write_text(f"admin {ADMIN}\nwriter {newcomer}\n")
    os.replace(replacement, tokens)
    wait_until(lambda: call("PUT", "/_cluster/metadata/k", newcomer, {"v": 6}) == 200, 10, "a good file is read")
    _, health = http("GET", node.url + "/_cluster/health", headers=bearer(ADMIN), context=context)
    assert not [found for found in health["problems"] if found["kind"] == "tokens_file"]
    assert http("GET", node.url + "/readyz", context=context)[0] == 200
    assert node.alive()


# -- mutual TLS between nodes -----------------------------------------------------------------------------


def transport_post(node: LocalNode, context: ssl.SSLContext | None, scheme: str = "https") -> int:
    """POST a junk body to the transport port; the HTTP status if the request got an answer."""
    status, _ = http("POST", f"{scheme}://{node.transport_address}/_transport/message", raw=b"{}", context=context)
    return status


def test_node_with_certificate_of_another_ca_cannot_join_or_send(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    require_openssl()
    pki = tmp_path / "pki"
    ca, foreign_ca = make_ca(pki, "cluster-ca"), make_ca(pki, "foreign-ca")
    certs = [make_cert(pki, ca, f"n{i}") for i in range(2)]
    foreign = make_cert(pki, foreign_ca, "intruder")
    cluster = make_cluster()
    members = start_nodes(cluster, lambda i: tls_settings("transport.ssl", certs[i]), 2)
    cluster.wait_master(nodes=2)
    member = members[0]

    # A node that trusts the cluster's CA (its certificate is public) but has a certificate of another CA,
    # seeded with the cluster's nodes: only the members' check of its certificate keeps it out.
    intruder_files = Cert(foreign.certificate, foreign.key, ca)
    intruder = cluster.start("intruder", extra=tls_settings("transport.ssl", intruder_files))  # joins only
    cluster.wait_http(intruder)
    assert intruder.log_path is not None
    wait_until(lambda: "transport.ssl.certificate" in intruder.log_path.read_text(), 20, "the intruder was refused")  # type: ignore[union-attr]
    time.sleep(2.0)  # discovery rounds every 200ms: plenty more attempts to join
    _, health = member.get("/_cluster/health")
    assert health["number_of_nodes"] == 2
    _, intruder_health = intruder.get("/_cluster/health?local=true")
    assert intruder_health["master_node"] is None

    # A request with the member's own certificate gets an HTTP answer (here: 400 for a junk envelope)...
    assert transport_post(member, client_context(ca, certs[1])) == 400
    # ... but not with the other CA's certificate, nor with none, nor in plain HTTP: the TLS handshake fails.
    for context in (client_context(ca, foreign), client_context(ca)):
        with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
            transport_post(member, context)
    with pytest.raises((ConnectionError, HTTPException, urllib.error.URLError)):
        transport_post(member, None, scheme="http")
    # The stream endpoint is behind the same handshake.
    with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
        http("GET", f"https://{member.transport_address}/_transport/stream", context=client_context(ca, foreign))


# -- certificate rotation ---------------------------------------------------------------------------------


def presented_certificate(address: tuple[str, int], context: ssl.SSLContext) -> bytes:
    with socket.create_connection(address, timeout=5) as raw, context.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def der_of(cert: Cert) -> bytes:
    return ssl.PEM_cert_to_DER_cert(cert.certificate.read_text())


def install(source: Cert, target: Cert) -> None:
    """Replace `target`'s files with `source`'s, each by an atomic rename (the pair is not atomic)."""
    for src, dst in ((source.key, target.key), (source.certificate, target.certificate)):
        staged = dst.with_suffix(dst.suffix + ".tmp")
        shutil.copyfile(src, staged)
        os.replace(staged, dst)


def test_certificate_rotation_during_writes_loses_nothing(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    require_openssl()
    pki = tmp_path / "pki"
    ca = make_ca(pki, "ca")
    live = [make_cert(pki / "live", ca, f"n{i}") for i in range(3)]
    renewed = [make_cert(pki / "renewed", ca, f"n{i}") for i in range(3)]
    secret = tmp_path / "secret"
    secret.write_text("a-cluster-secret-0123456789")

    def settings(i: int) -> dict[str, str]:
        # The HMAC stream authentication too: with mutual TLS, both apply.
        transport = {**tls_settings("transport.ssl", live[i]), "transport.secret_file": str(secret)}
        return {**transport, **tls_settings("http.ssl", live[i])}

    cluster = make_cluster(client_tls=client_context(ca))
    nodes = start_nodes(cluster, settings, 3)
    master = cluster.wait_master(nodes=3)
    # Written through the master and one follower; the other follower is restarted below.
    restarted = next(node for node in nodes if node is not master)
    entry_points = [node for node in nodes if node is not restarted]

    acked: dict[str, int] = {}
    failures: list[str] = []
    stop = threading.Event()

    def writer() -> None:
        index = 0
        while not stop.is_set():
            key = f"k{index}"
            try:
                status, body = entry_points[index % 2].put(f"/_cluster/metadata/{key}", {"i": index}, timeout=10)
            except OSError as error:
                failures.append(f"{key}: {error}")
            else:
                if status == 200:
                    acked[key] = index
                else:
                    failures.append(f"{key}: {status} {body}")
            index += 1

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(acked) >= 20, 30, "writes before the rotation")
        for new, old in zip(renewed, live, strict=True):
            install(new, old)
        # New connections get the new certificate, on both ports, with no restart.
        client = client_context(ca, renewed[0])
        for node, new in zip(nodes, renewed, strict=True):
            for port in (node.http_port, node.transport_port):
                address, expected = (node.host, port), der_of(new)
                wait_until(
                    lambda address=address, expected=expected: presented_certificate(address, client) == expected,  # type: ignore[misc]
                    10,
                    f"{node.name} presents its new certificate on port {port}",
                )
        # Still mutual: on the new context, the transport port refuses a client without a certificate, and
        # answers (401: no HMAC signature) one with a certificate of the CA.
        with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
            transport_post(nodes[0], client_context(ca))
        assert transport_post(nodes[0], client_context(ca, renewed[1])) == 401
        # New transport connections from the others: restart a follower, which they reconnect to.
        cluster.kill(restarted)
        cluster.start(restarted.name, extra=settings(nodes.index(restarted)))
        cluster.wait_http(restarted)
        cluster.wait_master(nodes=3, timeout=30)
        count = len(acked)
        wait_until(lambda: len(acked) >= count + 20, 30, "writes after the rotation")
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not failures, failures[:5]
    master = cluster.wait_master(nodes=3)
    for key, index in acked.items():
        status, body = master.get(f"/_cluster/metadata/{key}")
        assert status == 200 and body["value"] == {"i": index}, (key, status, body)


def test_reloading_context_takes_new_files_and_keeps_old_on_a_bad_pair(tmp_path: Path, openssl: str) -> None:
    require_openssl()
    ca = make_ca(tmp_path, "ca")
    first, second = make_cert(tmp_path / "a", ca, "n"), make_cert(tmp_path / "b", ca, "n")
    files = TlsFiles("transport.ssl", str(first.certificate), str(first.key), str(ca.certificate))
    now = [0.0]
    reloading = ReloadingContext(files, Side.CLIENT, clock=lambda: now[0])
    original = reloading.current()
    # Only the certificate replaced: it does not match the key, so the old context stays.
    shutil.copyfile(second.certificate, first.certificate)
    now[0] += 2
    assert reloading.current() is original and reloading.reloads == 0
    # The key follows: the pair loads.
    shutil.copyfile(second.key, first.key)
    now[0] += 2
    assert reloading.current() is not original and reloading.reloads == 1


def test_client_certificates_required_on_the_client_port(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    require_openssl()
    pki = tmp_path / "pki"
    ca, foreign_ca = make_ca(pki, "ca"), make_ca(pki, "foreign-ca")
    server, client, foreign = make_cert(pki, ca, "n1"), make_cert(pki, ca, "app"), make_cert(pki, foreign_ca, "x")
    cluster = make_cluster(client_tls=client_context(ca, client))
    settings = {**tls_settings("http.ssl", server), "http.ssl.client_authentication": "required"}
    (node,) = start_nodes(cluster, lambda _: settings, 1)
    cluster.wait_master(nodes=1)
    assert http("GET", node.url + "/_cluster/health", context=client_context(ca, client))[0] == 200
    for context in (client_context(ca), client_context(ca, foreign)):
        with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
            http("GET", node.url + "/_cluster/health", context=context)
