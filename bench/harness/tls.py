"""TLS material for the peer benchmarks: one CA and one certificate for 127.0.0.1, used by every node of
every system (client and peer ports), so that TLS costs the same handshakes and ciphers for each."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from coordinated.tools.devcerts import Ca, Cert, client_context, make_ca, make_cert


@dataclass(frozen=True)
class BenchTls:
    ca: Ca
    cert: Cert

    @classmethod
    def create(cls, directory: Path) -> BenchTls:
        ca = make_ca(directory, "bench-ca")
        return cls(ca, make_cert(directory, ca, "bench-node"))

    def ours_settings(self) -> dict[str, str]:
        """Mutual TLS between nodes, TLS on the client port (no client certificates, as for etcd below)."""
        files = {"certificate": str(self.cert.certificate), "key": str(self.cert.key)}
        settings = {"transport.ssl.enabled": "true", "http.ssl.enabled": "true"}
        for prefix in ("transport.ssl", "http.ssl"):
            settings.update({f"{prefix}.{name}": value for name, value in files.items()})
        settings["transport.ssl.certificate_authorities"] = str(self.ca.certificate)
        return settings

    def etcd_flags(self) -> list[str]:
        """Client TLS (no client certificates) and mutual TLS between members."""
        cert, key, ca = str(self.cert.certificate), str(self.cert.key), str(self.ca.certificate)
        return [
            f"--cert-file={cert}",
            f"--key-file={key}",
            f"--peer-cert-file={cert}",
            f"--peer-key-file={key}",
            f"--peer-trusted-ca-file={ca}",
            "--peer-client-cert-auth",
        ]

    def client_context(self) -> ssl.SSLContext:
        return client_context(self.ca)
