"""Access control's API as calls: who am I, custom roles, role mappings and quotas (docs/sidecar.md, "Access
control"). The answers are the API's JSON. Changes need the `admin` role; they answer once every node has applied
them (`acknowledged`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from coordinated.client.calls import Call, Retry, ok, segment

KEY_PRIVILEGES = ("read", "write", "session")
QUOTA_LIMITS = ("max_keys", "max_bytes", "max_sessions", "max_watch_streams", "max_writes_per_second")


def authenticate() -> Call[dict[str, Any]]:
    """`GET /_security/_authenticate`: `{"principal", "realm", "roles", "admin"}` of the caller."""
    return Call("GET", "/_security/_authenticate", ok, master_timeout=False)


def _named(base: str, name: str | None) -> str:
    return base if name is None else f"{base}/{segment(name)}"


def roles(name: str | None = None) -> Call[dict[str, Any]]:
    """Every role (the built-in ones too), or the one named: `{NAME: {"keys", "cluster", "built_in"}}`."""
    return Call("GET", _named("/_security/role", name), ok)


def role_body(grants: Mapping[str, Sequence[str]], cluster: Sequence[str] = ()) -> dict[str, Any]:
    """A role's body from the privileges by prefix: `{"app/a/": ["read", "write"]}`."""
    keys = [{"prefixes": [prefix], "privileges": list(privileges)} for prefix, privileges in grants.items()]
    return {"keys": keys, "cluster": list(cluster)}


def put_role(name: str, body: Mapping[str, Any]) -> Call[dict[str, Any]]:
    """Defines or replaces a custom role (`role_body` builds one); sending it again ends in the same role."""
    return Call("PUT", _named("/_security/role", name), ok, body=dict(body))


def delete_role(name: str) -> Call[dict[str, Any]]:
    # A repeated delete of a role the first one deleted would answer 404.
    return Call("DELETE", _named("/_security/role", name), ok, retry=Retry.NEVER_BLIND)


def role_mappings(name: str | None = None) -> Call[dict[str, Any]]:
    return Call("GET", _named("/_security/role_mapping", name), ok)


def put_role_mapping(name: str, roles: Sequence[str], principals: Sequence[str]) -> Call[dict[str, Any]]:
    """Gives `roles` to `principals` (names, or a name's start followed by `*`)."""
    body = {"roles": list(roles), "principals": list(principals)}
    return Call("PUT", _named("/_security/role_mapping", name), ok, body=body)


def delete_role_mapping(name: str) -> Call[dict[str, Any]]:
    return Call("DELETE", _named("/_security/role_mapping", name), ok, retry=Retry.NEVER_BLIND)


def quotas(name: str | None = None) -> Call[dict[str, Any]]:
    """Every quota, or the one named, with its usage: `{NAME: {"prefix", "max_...", "usage"}}`."""
    return Call("GET", _named("/_quota", name), ok)


def put_quota(name: str, prefix: str, limits: Mapping[str, int | None], force: bool = False) -> Call[dict[str, Any]]:
    """Limits (of QUOTA_LIMITS; None: not limited) on what is under `prefix`. Limits below what the prefix uses
    now are refused unless `force` (which stops only the growth)."""
    unknown = sorted(set(limits) - set(QUOTA_LIMITS))
    if unknown:
        raise ValueError(f"unknown quota limits {unknown}: a limit is one of {', '.join(QUOTA_LIMITS)}")
    body: dict[str, Any] = {"prefix": prefix, **{key: value for key, value in limits.items() if value is not None}}
    params: dict[str, str | list[str]] = {"force": "true"} if force else {}
    return Call("PUT", _named("/_quota", name), ok, params, body=body)


def delete_quota(name: str) -> Call[dict[str, Any]]:
    return Call("DELETE", _named("/_quota", name), ok, retry=Retry.NEVER_BLIND)
