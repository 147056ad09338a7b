"""TLS contexts for both ports, built with the stdlib `ssl` module from PEM files and reloaded when the files
change, so that a renewed certificate is used without a restart.

A server keeps one listening `SSLContext` for its lifetime (asyncio binds it to the listener). Its
`sni_callback`, which OpenSSL runs on every ClientHello (with or without a server name), swaps the
connection onto the newest context, so each new connection is served with the certificate and CA that are
on disk now; connections already open keep theirs. The files are looked at (stat only) at most once per
`CHECK_INTERVAL_S`, and re-read only when one changed. A file set that does not load (a certificate replaced
but its key not yet, say) keeps the previous context and is tried again at the next check.

The transport is mutual TLS: both sides present a certificate and require the peer's to chain to the
cluster's CA (`certificate_authorities`). Peers are addressed by IP (resolved seeds, published addresses),
so the chain is verified but not the host name, as with Elasticsearch's `verification_mode: certificate`.
A certificate the transport accepts is a node of the cluster, with every power of one (it can publish states),
so when the CA also issues other certificates (client certificates for the client port, say), the transport's
`TrustRestrictions` (`transport.ssl.trust_restrictions`, like Elasticsearch's trust restrictions) say which of
its certificates are nodes': those with a name that matches one of the patterns.
"""

from __future__ import annotations

import enum
import fnmatch
import logging
import os
import re
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinated.coordination.settings import Choice, Parsed, Setting, Settings, SettingsRule, bool_setting

log = logging.getLogger("coordinated.tls")

CHECK_INTERVAL_S = 1.0
CLIENT_AUTHENTICATION = ("none", "optional", "required")


def parse_readable_file(value: str) -> str:
    path = Path(value)
    if not path.is_file():
        raise ValueError(f"[{value}] does not exist or is not a file")
    try:
        path.open("rb").close()
    except OSError as error:
        raise ValueError(f"cannot read [{value}]: {error.strerror or error}") from None
    return value


# The security settings are static and checked at startup (files are reloaded when they change). The names are
# Elasticsearch's, without its `xpack.security.` prefix.
TRANSPORT_SSL_ENABLED = bool_setting("transport.ssl.enabled", False, doc="`true` for mutual TLS between nodes")
TRANSPORT_SSL_CERTIFICATE: Setting[str | None] = Setting(
    "transport.ssl.certificate", Parsed(parse_readable_file), None, "this node's transport certificate (PEM)"
)
TRANSPORT_SSL_KEY: Setting[str | None] = Setting(
    "transport.ssl.key", Parsed(parse_readable_file), None, "the transport certificate's private key (PEM)"
)
TRANSPORT_SSL_CERTIFICATE_AUTHORITIES: Setting[str | None] = Setting(
    "transport.ssl.certificate_authorities",
    Parsed(parse_readable_file),
    None,
    "the cluster's CA (PEM); a peer's certificate must chain to it",
)
HTTP_SSL_ENABLED = bool_setting(
    "http.ssl.enabled", False, doc="`true` for HTTPS on the client port's published address"
)
HTTP_SSL_CERTIFICATE: Setting[str | None] = Setting(
    "http.ssl.certificate", Parsed(parse_readable_file), None, "the client port's certificate (PEM)"
)
HTTP_SSL_KEY: Setting[str | None] = Setting(
    "http.ssl.key", Parsed(parse_readable_file), None, "the client port certificate's private key (PEM)"
)
HTTP_SSL_CERTIFICATE_AUTHORITIES: Setting[str | None] = Setting(
    "http.ssl.certificate_authorities", Parsed(parse_readable_file), None, "CAs for client certificates (PEM)"
)
HTTP_SSL_CLIENT_AUTHENTICATION = Setting(
    "http.ssl.client_authentication",
    Choice(CLIENT_AUTHENTICATION),
    "none",
    "client certificates: `none`, `optional` or `required`",
)


def parse_name_patterns(value: str) -> tuple[str, ...]:
    patterns = tuple(part.strip() for part in value.split(",") if part.strip())
    for pattern in patterns:
        if any(char.isspace() for char in pattern) or not pattern.strip("*."):
            raise ValueError(f"[{pattern}] is not a name pattern (e.g. *.demo-headless.default.svc)")
    return patterns


TRANSPORT_SSL_TRUST_RESTRICTIONS: Setting[tuple[str, ...]] = Setting(
    "transport.ssl.trust_restrictions",
    Parsed(parse_name_patterns),
    "",
    "comma list of name patterns (`*` within one DNS label): only a certificate of the CA with a matching DNS "
    "name, IP address or common name is a node; empty: every certificate of the CA",
)


@dataclass(frozen=True)
class TlsSettings:
    """The TLS settings of one port."""

    prefix: str  # for messages: `transport.ssl` or `http.ssl`
    enabled: Setting[bool]
    certificate: Setting[str | None]
    key: Setting[str | None]
    certificate_authorities: Setting[str | None]
    # What a server asks of its clients; None: required (the transport is always mutual).
    client_authentication: Setting[str] | None = None

    def all(self) -> tuple[Setting[object], ...]:
        optional = (self.client_authentication,) if self.client_authentication is not None else ()
        return (self.enabled, self.certificate, self.key, self.certificate_authorities, *optional)

    def files(self, settings: Settings) -> TlsFiles | None:
        """The port's files, or None when its TLS is off."""
        certificate, key = settings[self.certificate], settings[self.key]
        if not settings[self.enabled] or certificate is None or key is None:
            return None
        authentication = "required" if self.client_authentication is None else settings[self.client_authentication]
        return TlsFiles(self.prefix, certificate, key, settings[self.certificate_authorities], authentication)

    def problem(self, settings: Settings) -> str | None:
        """What is missing or does not load, naming the settings; None when the port's TLS is off or usable."""
        if not settings[self.enabled]:
            return None
        for part in (self.certificate, self.key):
            if settings[part] is None:
                return f"setting [{part.name}] is required when [{self.enabled.name}] is true"
        authentication = None if self.client_authentication is None else settings[self.client_authentication]
        if authentication != "none" and settings[self.certificate_authorities] is None:
            why = (
                "transport TLS is mutual"
                if self.client_authentication is None
                else f"[{self.client_authentication.name}] is [{authentication}]"
            )
            return f"setting [{self.certificate_authorities.name}] is required: {why}"
        files = self.files(settings)
        return files.problem() if files is not None else None


TRANSPORT_TLS = TlsSettings(
    "transport.ssl",
    TRANSPORT_SSL_ENABLED,
    TRANSPORT_SSL_CERTIFICATE,
    TRANSPORT_SSL_KEY,
    TRANSPORT_SSL_CERTIFICATE_AUTHORITIES,
)
HTTP_TLS = TlsSettings(
    "http.ssl",
    HTTP_SSL_ENABLED,
    HTTP_SSL_CERTIFICATE,
    HTTP_SSL_KEY,
    HTTP_SSL_CERTIFICATE_AUTHORITIES,
    HTTP_SSL_CLIENT_AUTHENTICATION,
)
TLS_FILES_LOAD = SettingsRule(
    "with `transport.ssl.enabled` or `http.ssl.enabled`, the port's certificate and key are required, and so is "
    "its CA for the transport and for `http.ssl.client_authentication` other than `none`; the files must load",
    lambda settings: TRANSPORT_TLS.problem(settings) or HTTP_TLS.problem(settings),
)


def client_certificates_would_be_nodes(settings: Settings) -> str | None:
    """A CA that issues client certificates for the client port and is trusted by the transport too would make
    every such certificate a node, with the power to publish states, unless trust restrictions say which of its
    certificates are nodes': refused at startup (fail closed) rather than left open."""
    if not settings[TRANSPORT_SSL_ENABLED] or settings[TRANSPORT_SSL_TRUST_RESTRICTIONS]:
        return None
    transport_ca, http_ca = settings[TRANSPORT_SSL_CERTIFICATE_AUTHORITIES], settings[HTTP_SSL_CERTIFICATE_AUTHORITIES]
    if settings[HTTP_SSL_CLIENT_AUTHENTICATION] == "none" or transport_ca is None or http_ca is None:
        return None
    try:
        shared = pem_certificates(transport_ca) & pem_certificates(http_ca)
    except (OSError, ValueError) as error:
        return f"cannot compare [transport.ssl.certificate_authorities] and [http.ssl.certificate_authorities]: {error}"
    if not shared:
        return None
    return (
        "[http.ssl.client_authentication] accepts client certificates from a CA that [transport.ssl."
        "certificate_authorities] trusts too, so every client certificate could act as a node of the cluster: set "
        "[transport.ssl.trust_restrictions] to the names of the node certificates, or issue client certificates "
        "from another CA"
    )


CLIENT_CERTIFICATES_ARE_NOT_NODES = SettingsRule(
    "with `transport.ssl.enabled` and `http.ssl.client_authentication` other than `none`, a CA trusted by both "
    "ports needs `transport.ssl.trust_restrictions`, or every client certificate could act as a node",
    client_certificates_would_be_nodes,
)


class Side(enum.Enum):
    SERVER = "server"
    CLIENT = "client"


@dataclass(frozen=True)
class TlsFiles:
    """The PEM files of one port: `prefix` is `transport.ssl` or `http.ssl` (for messages)."""

    prefix: str
    certificate: str
    key: str
    certificate_authorities: str | None
    client_authentication: str = "required"  # what a server asks of its clients

    def paths(self) -> tuple[str, ...]:
        cas = (self.certificate_authorities,) if self.certificate_authorities else ()
        return (self.certificate, self.key, *cas)

    def build(self, side: Side) -> ssl.SSLContext:
        """A fresh context from the files; raises ssl.SSLError or OSError if they do not load."""
        if side is Side.SERVER:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.verify_mode = {
                "none": ssl.CERT_NONE,
                "optional": ssl.CERT_OPTIONAL,
                "required": ssl.CERT_REQUIRED,
            }[self.client_authentication]
        else:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False  # see the module docstring
            context.verify_mode = ssl.CERT_REQUIRED
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.certificate, self.key)
        if self.certificate_authorities:
            context.load_verify_locations(cafile=self.certificate_authorities)
        return context

    def problem(self) -> str | None:
        """Why the files cannot make a context, naming the settings; None if they can."""
        for side in (Side.SERVER, Side.CLIENT) if self.prefix == "transport.ssl" else (Side.SERVER,):
            try:
                self.build(side)
            except ssl.SSLError as error:
                return (
                    f"[{self.prefix}.certificate] [{self.certificate}] and [{self.prefix}.key] [{self.key}]"
                    f"{' with [' + self.prefix + '.certificate_authorities]' if self.certificate_authorities else ''}"
                    f" do not load: {error.reason or error}"
                )
            except OSError as error:
                return f"cannot read the files of [{self.prefix}.*]: {error}"
        return None


def _fingerprint(paths: tuple[str, ...]) -> tuple[tuple[int, int, int], ...] | None:
    try:
        stats = [os.stat(path) for path in paths]  # follows symlinks: a Kubernetes Secret swaps a link
    except OSError:
        return None
    return tuple((stat.st_ino, stat.st_mtime_ns, stat.st_size) for stat in stats)


class ReloadingContext:
    """The newest context built from `files` for one side; see the module docstring."""

    def __init__(self, files: TlsFiles, side: Side, clock: Callable[[], float] = time.monotonic) -> None:
        self.files = files
        self.side = side
        self._clock = clock
        self._fingerprint = _fingerprint(files.paths())
        self._context = files.build(side)
        self._checked_at = clock()
        self._failed: tuple[tuple[int, int, int], ...] | None = None
        self.reloads = 0

    def current(self) -> ssl.SSLContext:
        now = self._clock()
        if now - self._checked_at >= CHECK_INTERVAL_S:
            self._checked_at = now
            self._reload_if_changed()
        return self._context

    def _reload_if_changed(self) -> None:
        fingerprint = _fingerprint(self.files.paths())
        if fingerprint is None or fingerprint == self._fingerprint:
            return
        try:
            context = self.files.build(self.side)
        except (ssl.SSLError, OSError) as error:
            if fingerprint != self._failed:  # one warning per file set, not one a second
                self._failed = fingerprint
                log.warning(
                    "the files of [%s.*] changed but do not load (%s); keeping the previous ones",
                    self.files.prefix,
                    error,
                )
            return
        self._context, self._fingerprint, self._failed = context, fingerprint, None
        self.reloads += 1
        log.info("reloaded the certificate of [%s.*] from %s", self.files.prefix, self.files.certificate)

    def listening_context(self) -> ssl.SSLContext:
        """The context for a server's listener: each handshake moves onto the newest context."""
        assert self.side is Side.SERVER
        listener = self.files.build(Side.SERVER)

        def use_newest(connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: ssl.SSLContext) -> None:
            newest = self.current()
            if connection.context is not newest:
                connection.context = newest

        listener.sni_callback = use_newest
        return listener


class TrustRestrictions:
    """Which certificates of the CA are nodes: those with a DNS name, IP address or common name that matches one
    of `patterns`. A pattern matches a name of as many dot-separated labels, label by label, where `*` matches
    any characters within one label (`*.demo-headless.ns.svc` matches `demo-0.demo-headless.ns.svc`)."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns = tuple(pattern.strip().lower() for pattern in patterns if pattern.strip())

    def problem(self, peercert: Mapping[str, Any] | None) -> str | None:
        """Why the peer's certificate (as `SSLObject.getpeercert()` gives it) is not a node's; None if it is."""
        names = certificate_names(peercert or {})
        if any(_matches(pattern, name) for pattern in self.patterns for name in names):
            return None
        return (
            f"its certificate (names {names}) matches none of [transport.ssl.trust_restrictions] "
            f"{list(self.patterns)}: it is not a node certificate of this cluster"
        )


def certificate_names(peercert: Mapping[str, Any]) -> list[str]:
    names = [str(value) for kind, value in peercert.get("subjectAltName", ()) if kind in ("DNS", "IP Address")]
    names += [str(value) for rdn in peercert.get("subject", ()) for key, value in rdn if key == "commonName"]
    return names


def _matches(pattern: str, name: str) -> bool:
    wanted, labels = pattern.split("."), name.lower().split(".")
    return len(wanted) == len(labels) and all(
        fnmatch.fnmatchcase(label, want) for want, label in zip(wanted, labels, strict=True)
    )


_PEM_CERTIFICATE = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)


def pem_certificates(path: str) -> set[bytes]:
    """The certificates of a PEM bundle, as DER (to compare two bundles); raises OSError."""
    with open(path, encoding="ascii", errors="replace") as bundle:
        return {ssl.PEM_cert_to_DER_cert(block) for block in _PEM_CERTIFICATE.findall(bundle.read())}
