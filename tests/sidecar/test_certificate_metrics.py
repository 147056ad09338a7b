"""The sidecar's own certificates in its metrics (observability/certificates.py): each port's certificate and
the earliest CA it trusts, read from the files at scrape time (a rotation shows at once)."""

from __future__ import annotations

import datetime
from pathlib import Path

from prometheus_client import CollectorRegistry

from coordinated.operator import certificates
from coordinated.sidecar.observability.certificates import METRIC, CertificateCollector
from coordinated.sidecar.peers.tls import TlsFiles

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def test_each_ports_certificate_and_the_earliest_ca(tmp_path: Path) -> None:
    old_ca = certificates.generate_ca("old", NOW, datetime.timedelta(days=30))
    new_ca = certificates.generate_ca("new", NOW, datetime.timedelta(days=3650))
    node = certificates.issue(new_ca, "demo-0", ["demo-0"], NOW, datetime.timedelta(days=90))
    (tmp_path / "node.crt").write_bytes(node.certificate)
    (tmp_path / "node.key").write_bytes(node.key)
    (tmp_path / "cas.crt").write_bytes(new_ca.certificate + old_ca.certificate)  # a CA bundle mid-rotation
    transport = TlsFiles(
        "transport.ssl", str(tmp_path / "node.crt"), str(tmp_path / "node.key"), str(tmp_path / "cas.crt")
    )
    registry = CollectorRegistry()
    registry.register(CertificateCollector({"transport": transport, "http": None}))

    def value(port: str, kind: str) -> float | None:
        return registry.get_sample_value(METRIC, {"port": port, "kind": kind})

    assert value("transport", "certificate") == (NOW + datetime.timedelta(days=90)).timestamp()
    assert value("transport", "ca") == (NOW + datetime.timedelta(days=30)).timestamp()
    assert value("http", "certificate") is None  # no TLS on that port: no series
    renewed = certificates.issue(new_ca, "demo-0", ["demo-0"], NOW, datetime.timedelta(days=180))
    (tmp_path / "node.crt").write_bytes(renewed.certificate)
    assert value("transport", "certificate") == (NOW + datetime.timedelta(days=180)).timestamp()
    (tmp_path / "node.crt").write_text("half a rotation")
    assert value("transport", "certificate") is None and value("transport", "ca") is not None
