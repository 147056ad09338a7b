"""Step: the cluster's CA, its pods' certificates and its role tokens, created once and renewed when due.

It runs even while the cluster is paused or its spec is invalid (then it only reads): letting certificates
expire would be worse than any change. What it finds (the admin token, the CA) is what the sidecar calls of
the later steps use.
"""

from __future__ import annotations

import datetime
import logging
import secrets
from collections.abc import Mapping
from typing import Any

import kopf

from coordinated.operator import certificates, manifests, metrics, security
from coordinated.operator.kube import Kube
from coordinated.operator.observation import PodObservation, StatefulSetObservation
from coordinated.operator.reconcile.context import Context, Event, Secured, StepResult
from coordinated.operator.spec import ClusterSpec
from coordinated.operator.status import Condition


async def step(ctx: Context) -> StepResult:
    spec = ctx.spec
    statefulset = await ctx.reads.statefulset(manifests.statefulset_name(spec))
    nonvoter_set = await ctx.reads.statefulset(manifests.nonvoter_statefulset_name(spec))
    pods = certificate_pods(spec, statefulset, nonvoter_set, await ctx.reads.pods())
    ctx.secured = await ensure_security(
        ctx.kube, spec, pods, write=not ctx.problems, logger=ctx.logger, previous_status=ctx.previous_status
    )
    return StepResult(conditions=ctx.secured.conditions, events=ctx.secured.events)


def certificate_pods(
    spec: ClusterSpec,
    statefulset: StatefulSetObservation | None,
    nonvoter_set: StatefulSetObservation | None,
    pods: Mapping[str, PodObservation],
) -> tuple[str, ...]:
    """Every pod that may run before the next pass, in both pools: the spec's, the StatefulSets', the hibernated
    voters', and any still present."""

    def count(name: str, wanted: int, current: StatefulSetObservation | None) -> int:
        prefix = f"{name}-"
        ordinals = [int(pod[len(prefix) :]) for pod in pods if pod.startswith(prefix) and pod[len(prefix) :].isdigit()]
        return max(wanted, current.replicas if current else 0, *(ordinal + 1 for ordinal in ordinals))

    voters = count(manifests.statefulset_name(spec), max(spec.voters, spec.hibernated_voters or 0), statefulset)
    nonvoters = count(manifests.nonvoter_statefulset_name(spec), spec.non_voters, nonvoter_set)
    return (*manifests.pod_names(spec, voters), *manifests.nonvoter_pod_names(spec, nonvoters))


async def _read_secret(kube: Kube, name: str, namespace: str) -> dict[str, bytes]:
    return security.decode_secret_data(await kube.secret_data(name, namespace))


async def ensure_tokens(kube: Kube, spec: ClusterSpec, write: bool) -> dict[str, str]:
    """The role tokens (suffix -> token), each created once in its own Secret; the tokens file follows them.

    Deleting a token Secret rotates that token: a new one is generated here and the sidecars re-read the
    tokens file when the kubelet projects it.
    """
    tokens: dict[str, str] = {}
    for suffix in manifests.TOKEN_ROLES:
        name = manifests.token_secret_name(spec, suffix)
        token = (await _read_secret(kube, name, spec.namespace)).get(manifests.TOKEN_KEY, b"").decode()
        if not token and write:
            token = secrets.token_urlsafe(32)
            if not await kube.create_if_absent(security.token_secret(spec, suffix, token)):
                token = (await _read_secret(kube, name, spec.namespace)).get(manifests.TOKEN_KEY, b"").decode()
        if token:
            tokens[suffix] = token
    if write and len(tokens) == len(manifests.TOKEN_ROLES):
        await kube.apply(security.tokens_file_secret(spec, tokens))
    return tokens


async def ensure_builtin_certificates(
    kube: Kube, spec: ClusterSpec, pods: tuple[str, ...], write: bool, now: datetime.datetime
) -> tuple[bytes | None, list[Event]]:
    """The cluster's CA (created once, never replaced) and every pod's certificate, renewed when due."""
    events: list[Event] = []
    ca_name = manifests.ca_secret_name(spec)
    ca = security.ca_from_secret(await _read_secret(kube, ca_name, spec.namespace))
    if ca is None and write:
        lifetime = certificates.parse_duration(spec.tls.ca_lifetime)
        ca = certificates.generate_ca(f"{spec.name}.{spec.namespace} coordinated CA", now, lifetime)
        if not await kube.create_if_absent(security.ca_secret(spec, ca)):
            ca = security.ca_from_secret(await _read_secret(kube, ca_name, spec.namespace))
        else:
            events.append(("Normal", "CertificateAuthorityCreated", f"created the cluster's CA in Secret {ca_name}"))
    if ca is None:
        return None, events
    if write:
        existing = await _read_secret(kube, manifests.certificates_secret_name(spec), spec.namespace)
        planned = security.plan_certificates(spec, ca, existing, pods, now)
        metrics.record_certificate_expiry(spec.namespace, spec.name, planned.data)
        if planned.changed:
            await kube.apply(security.certificates_secret(spec, planned.data))
            if planned.issued:
                issued = ", ".join(f"{pod} ({why})" for pod, why in planned.issued)
                events.append(("Normal", "CertificatesIssued", f"issued certificates for {issued}"))
    return ca.certificate, events


async def ensure_security(
    kube: Kube,
    spec: ClusterSpec,
    pods: tuple[str, ...],
    *,
    write: bool,
    logger: kopf.Logger | logging.Logger,
    previous_status: Mapping[str, Any] | None = None,
    now: datetime.datetime | None = None,
) -> Secured:
    """Creates or renews what the spec asks for (when `write`), and returns what the sidecar calls need."""
    now = now or datetime.datetime.now(datetime.UTC)
    events: list[Event] = []
    conditions: list[Condition] = []
    token: str | None = None
    if spec.auth_enabled:
        token = (await ensure_tokens(kube, spec, write)).get("admin")
    if not spec.tls.enabled:
        return Secured(token=token)

    cert_manager = False
    if spec.tls.issuer_ref is not None:
        cert_manager = await kube.serves("cert-manager.io/v1", "Certificate")
        if not cert_manager:
            message = "tls.issuerRef is set but cert-manager is not installed: the operator's own CA signs instead"
            conditions.append(Condition("CertManagerIssuer", False, "CertManagerNotInstalled", message))
            before = [
                c for c in (previous_status or {}).get("conditions") or () if c.get("type") == "CertManagerIssuer"
            ]
            if not before or before[0].get("status") != "False":  # one event per fallback, not one per pass
                events.append(("Warning", "CertManagerNotInstalled", message))
        else:
            message = f"{spec.tls.issuer_ref.kind} {spec.tls.issuer_ref.name} signs the pods' certificate"
            conditions.append(Condition("CertManagerIssuer", True, "CertManagerInstalled", message))
    source = manifests.tls_source_of(spec, cert_manager)
    if source == manifests.CERT_MANAGER_TLS:
        if write:
            await kube.apply(security.cert_manager_certificate(spec))
        issued = await _read_secret(kube, manifests.cert_manager_secret_name(spec), spec.namespace)
        ca_pem = issued.get(manifests.CA_CERT_KEY)
        if not ca_pem and issued:
            logger.warning("%s has no ca.crt: the issuer must be a CA issuer", manifests.cert_manager_secret_name(spec))
    else:
        ca_pem, issued_events = await ensure_builtin_certificates(kube, spec, pods, write, now)
        events += issued_events
    return Secured(source, token, ca_pem or None, tuple(events), tuple(conditions))
