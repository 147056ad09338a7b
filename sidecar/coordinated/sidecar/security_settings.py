"""The security settings (TLS on both ports, client tokens): static, checked at startup with messages that
name the setting. The names are Elasticsearch's, without its `xpack.security.` prefix."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from coordinated.coordination.settings import Setting, SettingsError, parse_bool
from coordinated.sidecar.access import TokensFileError, load_tokens
from coordinated.sidecar.tls import CLIENT_AUTHENTICATION, TlsFiles, pem_certificates


def parse_readable_file(value: str) -> str:
    path = Path(value)
    if not path.is_file():
        raise ValueError(f"[{value}] does not exist or is not a file")
    try:
        path.open("rb").close()
    except OSError as error:
        raise ValueError(f"cannot read [{value}]: {error.strerror or error}") from None
    return value


def parse_client_authentication(value: str) -> str:
    if value not in CLIENT_AUTHENTICATION:
        raise ValueError(f"expected one of {list(CLIENT_AUTHENTICATION)}, got [{value}]")
    return value


def parse_name_patterns(value: str) -> tuple[str, ...]:
    patterns = tuple(part.strip() for part in value.split(",") if part.strip())
    for pattern in patterns:
        if any(char.isspace() for char in pattern) or not pattern.strip("*."):
            raise ValueError(f"[{pattern}] is not a name pattern (e.g. *.demo-headless.default.svc)")
    return patterns


def parse_tokens_file(value: str) -> str:
    try:
        load_tokens(value)
    except TokensFileError as error:
        raise ValueError(str(error)) from None
    return value


SECURITY_SETTINGS = (
    *(
        setting
        for prefix in ("transport.ssl", "http.ssl")
        for setting in (
            Setting(f"{prefix}.enabled", parse_bool, "false"),
            Setting(f"{prefix}.certificate", parse_readable_file, None),
            Setting(f"{prefix}.key", parse_readable_file, None),
            Setting(f"{prefix}.certificate_authorities", parse_readable_file, None),
        )
    ),
    Setting("transport.ssl.trust_restrictions", parse_name_patterns, ""),
    Setting("http.ssl.client_authentication", parse_client_authentication, "none"),
    Setting("http.auth.tokens_file", parse_tokens_file, None),
)


def check_security_settings(parsed: Mapping[str, Any]) -> None:
    for prefix in ("transport.ssl", "http.ssl"):
        if not parsed.get(f"{prefix}.enabled"):
            continue
        for part in ("certificate", "key"):
            if not parsed.get(f"{prefix}.{part}"):
                raise SettingsError(f"setting [{prefix}.{part}] is required when [{prefix}.enabled] is true")
        needs_ca = prefix == "transport.ssl" or parsed.get("http.ssl.client_authentication") != "none"
        if needs_ca and not parsed.get(f"{prefix}.certificate_authorities"):
            why = (
                "transport TLS is mutual"
                if prefix == "transport.ssl"
                else f"[http.ssl.client_authentication] is [{parsed.get('http.ssl.client_authentication')}]"
            )
            raise SettingsError(f"setting [{prefix}.certificate_authorities] is required: {why}")
        files = TlsFiles.from_settings(parsed, prefix)
        problem = files.problem() if files is not None else None
        if problem is not None:
            raise SettingsError(problem)
    problem = client_certificates_would_be_nodes(parsed)
    if problem is not None:
        raise SettingsError(problem)


def client_certificates_would_be_nodes(parsed: Mapping[str, Any]) -> str | None:
    """A CA that issues client certificates for the client port and is trusted by the transport too would make
    every such certificate a node, with the power to publish states, unless trust restrictions say which of its
    certificates are nodes': refused at startup (fail closed) rather than left open."""
    if not parsed.get("transport.ssl.enabled") or parsed.get("transport.ssl.trust_restrictions"):
        return None
    if parsed.get("http.ssl.client_authentication", "none") == "none":
        return None
    try:
        shared = pem_certificates(parsed["transport.ssl.certificate_authorities"]) & pem_certificates(
            parsed["http.ssl.certificate_authorities"]
        )
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
