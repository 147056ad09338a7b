"""Step: the Kubernetes API server's service-account signing keys, for the sidecars that verify ServiceAccount
tokens against them (the realm `kubernetes`, on with tokens unless spec.access.serviceAccounts turns it off).

Each pass reads the API server's OIDC discovery (its issuer, `/.well-known/openid-configuration`) and its public
keys (`/openid/v1/jwks`): what any OIDC relying party may read, and all the operator's rights for it
(non-resource `get` on those two paths). It checks them with the sidecars' own parser and applies them to the
ConfigMap `NAME-service-account-keys`, which every pod mounts; the kubelet projects a change within a minute or
two and the sidecars re-read the file. So a key the API server adds before it signs with it (a rotation done as
Kubernetes documents it) reaches the sidecars before its first token, and a key it drops stops verifying.

When the keys cannot be read, the ConfigMap keeps the last ones (the sidecars go on verifying every token signed
with them): the condition `ServiceAccountKeys` turns False with the reason, and a Warning says so once. Like the
certificates, the keys are kept up to date while the cluster is paused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from coordinated.operator import manifests
from coordinated.operator.reconcile.context import Context, Event, StepResult
from coordinated.operator.status import Condition
from coordinated.sidecar.auth.service_accounts import KeysFileError, parse_keys

CONDITION = "ServiceAccountKeys"


def keys_document(discovery: bytes, jwks: bytes) -> tuple[str, str, list[str]]:
    """The keys file of the sidecars (`http.auth.kubernetes.keys_file`): the JWKS as served, with the discovery
    document's issuer; its issuer and its keys' ids. ValueError naming what is wrong."""
    try:
        issuer = json.loads(discovery).get("issuer")
        keys: dict[str, Any] = json.loads(jwks)
    except (ValueError, AttributeError) as error:
        raise ValueError(f"the API server's discovery answered something that is not JSON: {error}") from None
    if not isinstance(keys, dict):
        raise ValueError("the API server's /openid/v1/jwks is not a JWK Set")
    document = json.dumps({**keys, "issuer": issuer}, sort_keys=True, indent=1)
    try:
        parsed = parse_keys(document, "the API server's keys")
    except KeysFileError as error:
        raise ValueError(str(error)) from None
    return document, parsed.issuer, sorted(str(kid) for kid, found in parsed.keys.items() for _ in found)


def _describe(error: Exception) -> str:
    status, reason = getattr(error, "status", None), getattr(error, "reason", None)
    if isinstance(status, int):
        hint = (
            " (the operator needs get on the non-resource URLs /.well-known/openid-configuration and /openid/v1/jwks)"
        )
        return f"Kubernetes API error {status} {reason or ''}".rstrip() + (hint if status in (401, 403) else "")
    return " ".join(f"{type(error).__name__}: {error}".split())[:300]


async def step(ctx: Context) -> StepResult:
    spec = ctx.spec
    if manifests.service_account_audience(spec) is None or ctx.problems:
        return StepResult()
    name = manifests.service_account_keys_configmap_name(spec)
    before: Mapping[str, Any] = next(
        (c for c in ctx.previous_status.get("conditions") or () if c.get("type") == CONDITION), {}
    )
    try:
        document, issuer, kids = keys_document(*await ctx.kube.service_account_issuer())
    except Exception as error:  # the pass goes on: the sidecars keep the keys of the ConfigMap
        message = (
            f"cannot read the Kubernetes API server's signing keys: {_describe(error)}; ConfigMap {name} keeps "
            "the keys read before, and ServiceAccount tokens signed with a newer key are refused until then"
        )
        condition = Condition(CONDITION, False, "DiscoveryFailed", message)
        events: tuple[Event, ...] = ()
        if (before.get("status"), before.get("message")) != ("False", message):
            ctx.logger.warning("%s", message)
            events = (("Warning", "ServiceAccountKeysUnavailable", message),)
        return StepResult(conditions=(condition,), events=events)
    await ctx.kube.apply(manifests.service_account_keys_configmap(spec, document))
    shown = ", ".join(kid[:12] for kid in kids)
    message = f"{len(kids)} signing key(s) ({shown}) of the Kubernetes API server [{issuer}] in ConfigMap {name}"
    changed = before.get("status") == "True" and before.get("message") != message
    events = (("Normal", "ServiceAccountKeysChanged", message),) if changed or before.get("status") == "False" else ()
    return StepResult(conditions=(Condition(CONDITION, True, "Published", message),), events=events)
