"""`http.auth.kubernetes.*`: the audience and signing keys that Kubernetes ServiceAccount tokens are verified
against (auth/service_accounts.py, the realm that reads them)."""

from __future__ import annotations

import os

from coordinated.coordination.settings import Parsed, Setting, Settings, SettingsRule

MAX_AUDIENCE_LENGTH = 256


def _audience(value: str) -> str:
    if not value or len(value) > MAX_AUDIENCE_LENGTH or not value.isprintable() or any(c.isspace() for c in value):
        raise ValueError(f"an audience is 1 to {MAX_AUDIENCE_LENGTH} printable characters without spaces")
    return value


AUDIENCE: Setting[str | None] = Setting(
    "http.auth.kubernetes.audience",
    Parsed(_audience),
    None,
    "the audience a Kubernetes ServiceAccount token must be issued for (this cluster's own, so that no token "
    "made for another service is accepted); setting it (with `http.auth.kubernetes.keys_file`) turns the "
    "realm on",
)


def _absolute_path(value: str) -> str:
    if not os.path.isabs(value):
        raise ValueError(f"expected an absolute path, got [{value}]")
    return value


KEYS_FILE: Setting[str | None] = Setting(
    "http.auth.kubernetes.keys_file",
    Parsed(_absolute_path),
    None,
    "the Kubernetes API server's service-account signing keys: its JWKS (`/openid/v1/jwks`) with its `issuer` "
    "added (re-read when it changes)",
)


def _both_or_neither(settings: Settings) -> str | None:
    if (settings[AUDIENCE] is None) != (settings[KEYS_FILE] is None):
        return (
            f"settings [{AUDIENCE.name}] and [{KEYS_FILE.name}] go together: ServiceAccount tokens are verified "
            "for that audience against those keys"
        )
    return None


KUBERNETES_SETTINGS_TOGETHER = SettingsRule(
    f"`{AUDIENCE.name}` and `{KEYS_FILE.name}` are given together, or neither", _both_or_neither
)
