"""The node's own TLS certificates in its metrics: when the certificate of each port, and the earliest of the CAs
it trusts there, expire. Read from the files at scrape time, so a rotated certificate (a Secret the kubelet
swapped) shows at once, and an alert on them works while nothing else (an operator) is running."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

from cryptography import x509
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from coordinated.sidecar.peers.tls_settings import TlsFiles

log = logging.getLogger(__name__)
METRIC = "coordinated_tls_certificate_expiry_timestamp_seconds"


def _not_after(path: str) -> list[float]:
    """The expiry (Unix time) of every certificate in a PEM file."""
    with open(path, "rb") as file:
        return [cert.not_valid_after_utc.timestamp() for cert in x509.load_pem_x509_certificates(file.read())]


class CertificateCollector(Collector):
    """`ports`: the TLS files of each port (`transport`, `http`), None where TLS is off."""

    def __init__(self, ports: Mapping[str, TlsFiles | None]) -> None:
        self.ports = {port: files for port, files in ports.items() if files is not None}

    def collect(self) -> Iterator[Any]:
        if not self.ports:
            return
        family = GaugeMetricFamily(
            "coordinated_tls_certificate_expiry_timestamp_seconds",
            "When this node's TLS certificate of each port expires (kind=certificate, Unix time), and the earliest "
            "of the CAs it trusts there (kind=ca)",
            labels=["port", "kind"],
        )
        for port, files in sorted(self.ports.items()):
            for kind, path in (("certificate", files.certificate), ("ca", files.certificate_authorities)):
                if not path:
                    continue
                try:
                    expiries = _not_after(path)
                except (OSError, ValueError) as error:  # mid-rotation, or not PEM: the next scrape reads it again
                    log.debug("cannot read the expiry of %s: %s", path, error)
                    continue
                if expiries:
                    # The node's certificate is the file's first; of the CAs, the one that expires first matters.
                    family.add_metric([port, kind], expiries[0] if kind == "certificate" else min(expiries))
        yield family
