"""`coordinated audit --from-cluster` against a real sidecar with TLS on its client port and tokens on: the
audit sends the reader token and checks the sidecar's certificate against the cluster's CA, and says what is
missing when it cannot."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from coordinated.audit.cli import EXIT_OK, EXIT_UNUSABLE, main
from coordinated.tools.devcerts import client_context, have_openssl, make_ca, make_cert
from coordinated.tools.localcluster import LocalCluster, LocalNode

pytestmark = pytest.mark.timeout(600)

ADMIN, READER = "admin-token-0123456789", "reader-token-0123456789"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalNode, Path, Path]]:
    """A one-node cluster with TLS on the client port and tokens; its URL, the CA file and a reader token file."""
    assert have_openssl(), "needs the openssl command: make test installs it (scripts/system-deps.sh)"
    tmp = tmp_path_factory.mktemp("secured")
    ca = make_ca(tmp / "pki", "ca")
    cert = make_cert(tmp / "pki", ca, "n1")
    tokens = tmp / "tokens"
    tokens.write_text(f"admin {ADMIN}\nreader {READER}\n")
    reader = tmp / "reader-token"
    reader.write_text(READER + "\n")
    cluster = LocalCluster(
        tmp / "cluster", client_tls=client_context(ca), client_headers={"Authorization": f"Bearer {ADMIN}"}
    )
    settings = {
        "http.ssl.enabled": "true",
        "http.ssl.certificate": str(cert.certificate),
        "http.ssl.key": str(cert.key),
        "http.auth.tokens_file": str(tokens),
    }
    # Published on 127.0.0.2: the certificate names it, and the node's plain loopback listener is on 127.0.0.1.
    node = cluster.add("node-1")
    node.host = "127.0.0.2"
    cluster.start("node-1", ["node-1"], settings)
    try:
        cluster.wait_http(node)
        cluster.wait_master(nodes=1)
        for i in range(5):
            assert node.put(f"/_cluster/metadata/k{i}", i)[0] == 200
        assert node.url.startswith("https://127.0.0.2:")
        yield node, ca.certificate, reader
    finally:
        cluster.stop_all(graceful=True)


def run_audit(node: LocalNode, report_dir: Path, *extra: str) -> int:
    return main(["--from-cluster", node.url, "--report-dir", str(report_dir), "--no-html", *extra])


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COORDINATED_TOKEN", raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)


def test_with_the_reader_token_and_the_ca_the_audit_reads_the_history(
    spark: SparkSession, secured: tuple[LocalNode, Path, Path], tmp_path: Path
) -> None:
    node, ca, reader = secured
    code = run_audit(node, tmp_path, "--token-file", str(reader), "--ca-file", str(ca))
    report = json.loads((tmp_path / "audit-report.json").read_text())
    assert code == EXIT_OK and report["ok"] is True
    assert report["nodes"] == 1 and report["events"] >= 5  # at least the five applied writes


def test_the_operator_jobs_way_token_and_ca_from_the_environment(
    spark: SparkSession, secured: tuple[LocalNode, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node, ca, _ = secured
    monkeypatch.setenv("COORDINATED_TOKEN", READER)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    assert run_audit(node, tmp_path) == EXIT_OK


def test_without_a_token_the_audit_says_it_needs_one(
    spark: SparkSession, secured: tuple[LocalNode, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node, ca, _ = secured
    assert run_audit(node, tmp_path, "--ca-file", str(ca)) == EXIT_UNUSABLE
    err = capsys.readouterr().err
    assert "401" in err and "--token-file" in err


def test_without_the_ca_the_sidecar_certificate_is_not_trusted(
    spark: SparkSession, secured: tuple[LocalNode, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node, _, reader = secured
    assert run_audit(node, tmp_path, "--token-file", str(reader)) == EXIT_UNUSABLE
    err = capsys.readouterr().err
    assert "CERTIFICATE_VERIFY_FAILED" in err and "--ca-file" in err
    assert READER not in err  # the token never shows in messages


def test_a_token_file_that_cannot_be_read_is_named(
    secured: tuple[LocalNode, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node, ca, _ = secured
    missing = tmp_path / "no-such-token"
    assert run_audit(node, tmp_path, "--token-file", str(missing), "--ca-file", str(ca)) == EXIT_UNUSABLE
    assert f"cannot read the token file {missing}" in capsys.readouterr().err
