"""The built-in certificate authority: one CA per cluster, one certificate per pod, and when to renew.

Pure functions over PEM bytes (the `cryptography` package does the X.509 work); the current time is an
argument, so renewal is decided and tested without a clock. Keys are ECDSA P-256: quick to generate on
every renewal and accepted by every TLS stack the sidecar and its clients use.

Renewal never changes the CA, so a renewed certificate and the one it replaces are trusted by the same
peers: a node that still presents the old one (the kubelet projects Secrets with a delay) is not rejected.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Issued a little in the past, so a peer whose clock lags a few seconds does not see a future certificate.
_BACKDATE = datetime.timedelta(minutes=1)


@dataclass(frozen=True)
class KeyPair:
    certificate: bytes  # PEM
    key: bytes  # PEM, PKCS#8, unencrypted (it lives in a Secret)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def generate_ca(common_name: str, now: datetime.datetime, lifetime: datetime.timedelta) -> KeyPair:
    """A self-signed CA that may sign end-entity certificates only (path length 0)."""
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + lifetime)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(certificate.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue(
    ca: KeyPair,
    common_name: str,
    dns_names: Sequence[str],
    now: datetime.datetime,
    lifetime: datetime.timedelta,
) -> KeyPair:
    """A certificate for one pod, usable as a TLS server and client (the transport is mutual TLS)."""
    ca_certificate = x509.load_pem_x509_certificate(ca.certificate)
    ca_key = serialization.load_pem_private_key(ca.key, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an ECDSA key")
    key = _new_key()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])]))
        .issuer_name(ca_certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(min(now + lifetime, ca_certificate.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name) for name in dns_names]), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(certificate.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def dns_names_of(certificate_pem: bytes) -> tuple[str, ...]:
    certificate = x509.load_pem_x509_certificate(certificate_pem)
    try:
        san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    return tuple(san.get_values_for_type(x509.DNSName))


def validity(certificate_pem: bytes) -> tuple[datetime.datetime, datetime.datetime]:
    certificate = x509.load_pem_x509_certificate(certificate_pem)
    return certificate.not_valid_before_utc, certificate.not_valid_after_utc


def renewal_reason(
    certificate_pem: bytes | None,
    key_pem: bytes | None,
    ca_pem: bytes,
    dns_names: Sequence[str],
    now: datetime.datetime,
    renewal_fraction: float,
) -> str | None:
    """Why this pod's certificate must be (re)issued now, or None while it is good.

    A certificate is renewed once `renewal_fraction` of its lifetime has passed, so the new one reaches the
    pod (the kubelet projects Secret changes within a minute or two) long before the old one expires.
    """
    if not certificate_pem or not key_pem:
        return "missing"
    try:
        certificate = x509.load_pem_x509_certificate(certificate_pem)
        ca_certificate = x509.load_pem_x509_certificate(ca_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except ValueError:
        return "unreadable"
    if key.public_key() != certificate.public_key():
        return "key does not match"
    try:
        certificate.verify_directly_issued_by(ca_certificate)
    except (ValueError, TypeError, InvalidSignature):
        return "not issued by the cluster's CA"
    if sorted(dns_names_of(certificate_pem)) != sorted(dns_names):
        return "DNS names changed"
    start, end = certificate.not_valid_before_utc, certificate.not_valid_after_utc
    if now >= start + (end - start) * renewal_fraction:
        return f"due for renewal (expires {end:%Y-%m-%dT%H:%M:%SZ})"
    return None


def parse_duration(text: str) -> datetime.timedelta:
    """`90m`, `2160h`, `30d`: a positive whole number and one unit (the CRD's certificate lifetimes)."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = text[:-1], text[-1:]
    if unit not in units or not number.isdigit() or int(number) <= 0:
        raise ValueError(f"invalid duration [{text}]: expected a positive whole number and a unit s, m, h or d")
    return datetime.timedelta(seconds=int(number) * units[unit])
