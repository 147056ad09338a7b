"""Development certificates made with the `openssl` command, for the tests, the benchmarks and local trials
of TLS (`make test` installs openssl, see scripts/system-deps.sh). Not for production: on Kubernetes the
operator issues the certificates."""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def have_openssl() -> bool:
    return shutil.which("openssl") is not None


@dataclass(frozen=True)
class Ca:
    certificate: Path
    key: Path


@dataclass(frozen=True)
class Cert:
    certificate: Path
    key: Path
    ca: Ca


def make_ca(directory: Path, name: str) -> Ca:
    directory.mkdir(parents=True, exist_ok=True)
    ca = Ca(directory / f"{name}.crt", directory / f"{name}.key")
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(ca.key), "-out", str(ca.certificate), "-days", "2", "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    return ca


def make_cert(directory: Path, ca: Ca, name: str) -> Cert:
    """A certificate for 127.0.0.1 and 127.0.0.2 signed by `ca`, usable by a server and a client."""
    return _issue(
        directory,
        ca,
        name,
        "subjectAltName=IP:127.0.0.1,IP:127.0.0.2,DNS:localhost\n"
        "extendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n",
    )


def make_client_cert(directory: Path, ca: Ca, name: str) -> Cert:
    """A client certificate (for `http.ssl.client_authentication`) named `name`, signed by `ca`."""
    return _issue(
        directory, ca, name, f"subjectAltName=DNS:{name}\nextendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n"
    )


def _issue(directory: Path, ca: Ca, name: str, extensions_text: str) -> Cert:
    directory.mkdir(parents=True, exist_ok=True)
    key, csr, crt = directory / f"{name}.key", directory / f"{name}.csr", directory / f"{name}.crt"
    extensions = directory / f"{name}.ext"
    extensions.write_text(extensions_text)
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}",
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca.certificate), "-CAkey", str(ca.key), "-set_serial",
        str(int.from_bytes(os.urandom(8), "big")), "-days", "2", "-out", str(crt),
        "-extfile", str(extensions),
    )  # fmt: skip
    return Cert(crt, key, ca)


def client_context(ca: Ca | None, cert: Cert | None = None) -> ssl.SSLContext:
    """A client context trusting `ca` (any server if None), presenting `cert` if given."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    if ca is None:
        context.verify_mode = ssl.CERT_NONE
    else:
        context.load_verify_locations(cafile=str(ca.certificate))
    if cert is not None:
        context.load_cert_chain(str(cert.certificate), str(cert.key))
    return context
