"""The TLS settings of both ports (`transport.ssl.*`, `http.ssl.*`), the PEM files they name, and the startup checks
that the files load and that client certificates cannot act as nodes. `tls` builds and reloads the contexts."""

from __future__ import annotations

import enum
import re
import ssl
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from coordinated.coordination.settings import Parsed, Setting, Settings, SettingsRule, bool_setting, enum_setting


class ClientAuthentication(StrEnum):
    """What a server asks of its clients' certificates."""

    NONE = "none"
    OPTIONAL = "optional"  # a certificate, if sent, must verify
    REQUIRED = "required"


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
HTTP_SSL_CLIENT_AUTHENTICATION = enum_setting(
    "http.ssl.client_authentication",
    ClientAuthentication.NONE,
    doc="client certificates: `none`, `optional` or `required`",
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
    client_authentication: Setting[ClientAuthentication] | None = None

    def all(self) -> tuple[Setting[object], ...]:
        optional = (self.client_authentication,) if self.client_authentication is not None else ()
        return (self.enabled, self.certificate, self.key, self.certificate_authorities, *optional)

    def files(self, settings: Settings) -> TlsFiles | None:
        """The port's files, or None when its TLS is off."""
        certificate, key = settings[self.certificate], settings[self.key]
        if not settings[self.enabled] or certificate is None or key is None:
            return None
        authentication = (
            ClientAuthentication.REQUIRED
            if self.client_authentication is None
            else settings[self.client_authentication]
        )
        return TlsFiles(self.prefix, certificate, key, settings[self.certificate_authorities], authentication)

    def problem(self, settings: Settings) -> str | None:
        """What is missing or does not load, naming the settings; None when the port's TLS is off or usable."""
        if not settings[self.enabled]:
            return None
        for part in (self.certificate, self.key):
            if settings[part] is None:
                return f"setting [{part.name}] is required when [{self.enabled.name}] is true"
        authentication = None if self.client_authentication is None else settings[self.client_authentication]
        if authentication is not ClientAuthentication.NONE and settings[self.certificate_authorities] is None:
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
    if settings[HTTP_SSL_CLIENT_AUTHENTICATION] is ClientAuthentication.NONE or transport_ca is None or http_ca is None:
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
    client_authentication: ClientAuthentication = ClientAuthentication.REQUIRED  # what a server asks of its clients

    def paths(self) -> tuple[str, ...]:
        cas = (self.certificate_authorities,) if self.certificate_authorities else ()
        return (self.certificate, self.key, *cas)

    def build(self, side: Side) -> ssl.SSLContext:
        """A fresh context from the files; raises ssl.SSLError or OSError if they do not load."""
        if side is Side.SERVER:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.verify_mode = {
                ClientAuthentication.NONE: ssl.CERT_NONE,
                ClientAuthentication.OPTIONAL: ssl.CERT_OPTIONAL,
                ClientAuthentication.REQUIRED: ssl.CERT_REQUIRED,
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


_PEM_CERTIFICATE = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)


def pem_certificates(path: str) -> set[bytes]:
    """The certificates of a PEM bundle, as DER (to compare two bundles); raises OSError."""
    with open(path, encoding="ascii", errors="replace") as bundle:
        return {ssl.PEM_cert_to_DER_cert(block) for block in _PEM_CERTIFICATE.findall(bundle.read())}
