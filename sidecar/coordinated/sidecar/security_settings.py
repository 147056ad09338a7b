"""The security settings (TLS on both ports, client tokens): static, checked at startup with messages that
name the setting. The names are Elasticsearch's, without its `xpack.security.` prefix."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from coordinated.coordination.settings import Setting, SettingsError, parse_bool
from coordinated.sidecar.access import TokensFileError, load_tokens
from coordinated.sidecar.tls import CLIENT_AUTHENTICATION, TlsFiles


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
