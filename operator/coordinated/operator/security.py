"""Pure builders of a cluster's security objects: its CA, the pods' certificates, the role tokens, the
NetworkPolicy and (for cert-manager users) a Certificate. The handlers read what exists and write what
these return; nothing here talks to the API server or reads the clock.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coordinated.operator import certificates, manifests
from coordinated.operator.certificates import KeyPair
from coordinated.operator.sidecar_client import HTTP_PORT, TRANSPORT_PORT
from coordinated.operator.spec import ClusterSpec

Manifest = dict[str, Any]

# Without spec.clientAccess, the client port admits pods of the cluster's namespace carrying this label
# (value: the cluster's name), besides the cluster's own pods, its audit job and the operator.
CLIENT_LABEL = "coordinated.dev/client"


def _metadata(spec: ClusterSpec, name: str, component: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": spec.namespace,
        "labels": manifests.common_labels(spec, component),
        "ownerReferences": [manifests.owner_reference(spec)],
    }


def _secret(spec: ClusterSpec, name: str, data: Mapping[str, bytes], component: str) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _metadata(spec, name, component),
        "data": {key: base64.b64encode(value).decode() for key, value in sorted(data.items())},
    }


def decode_secret_data(data: Mapping[str, str] | None) -> dict[str, bytes]:
    return {key: base64.b64decode(value) for key, value in (data or {}).items()}


# ---- the built-in CA and the pods' certificates --------------------------------------------------------
def ca_secret(spec: ClusterSpec, ca: KeyPair) -> Manifest:
    """The CA's certificate and key. Created once; only the operator reads it (pods never mount it)."""
    data = {manifests.CA_CERT_KEY: ca.certificate, manifests.CA_KEY_KEY: ca.key}
    return _secret(spec, manifests.ca_secret_name(spec), data, "certificate-authority")


def ca_from_secret(data: Mapping[str, bytes]) -> KeyPair | None:
    cert, key = data.get(manifests.CA_CERT_KEY), data.get(manifests.CA_KEY_KEY)
    return KeyPair(cert, key) if cert and key else None


@dataclass(frozen=True)
class CertificatePlan:
    data: dict[str, bytes]  # the certificates Secret's whole content
    issued: tuple[tuple[str, str], ...]  # (pod, why) for each certificate (re)issued now
    removed: tuple[str, ...]  # pods whose certificate is dropped (scaled away)
    changed: bool  # the Secret must be written


def plan_certificates(
    spec: ClusterSpec,
    ca: KeyPair,
    existing: Mapping[str, bytes],
    pods: Sequence[str],
    now: datetime.datetime,
) -> CertificatePlan:
    """Keep every pod's certificate that is still good; issue the missing, changed and due ones.

    `pods` are all the pods that may run (before the StatefulSet grows, so a new pod never starts without
    its files). The CA's certificate is copied in as `ca.crt`, without its key.
    """
    lifetime = certificates.parse_duration(spec.tls.certificate_lifetime)
    data: dict[str, bytes] = {manifests.CA_CERT_KEY: ca.certificate}
    issued: list[tuple[str, str]] = []
    for pod in pods:
        names = manifests.pod_certificate_dns_names(spec, pod)
        cert, key = existing.get(f"{pod}.crt"), existing.get(f"{pod}.key")
        reason = certificates.renewal_reason(cert, key, ca.certificate, names, now, spec.tls.renewal_fraction)
        if reason is not None or cert is None or key is None:
            pair = certificates.issue(ca, manifests.pod_dns_name(spec, pod), names, now, lifetime)
            cert, key = pair.certificate, pair.key
            issued.append((pod, reason or "missing"))
        data[f"{pod}.crt"], data[f"{pod}.key"] = cert, key
    removed = tuple(
        sorted(
            key[: -len(".crt")]
            for key in existing
            if key.endswith(".crt") and key != manifests.CA_CERT_KEY and key[: -len(".crt")] not in pods
        )
    )
    return CertificatePlan(data, tuple(issued), removed, changed=dict(existing) != data)


def certificates_secret(spec: ClusterSpec, data: Mapping[str, bytes]) -> Manifest:
    """One Secret for all pods (`<pod>.crt`, `<pod>.key`, `ca.crt`): a StatefulSet's pods share one template,
    and each sidecar's settings name its own files through $(POD_NAME)."""
    return _secret(spec, manifests.certificates_secret_name(spec), data, "certificates")


def cert_manager_certificate(spec: ClusterSpec) -> Manifest:
    """A cert-manager Certificate for every pod (wildcard under the headless Service) and the Services.

    The issuer must fill `ca.crt` in the Secret (a CA or Vault issuer does; ACME does not): the sidecars
    verify peers against it.
    """
    issuer = spec.tls.issuer_ref
    assert issuer is not None  # the caller checked
    lifetime = certificates.parse_duration(spec.tls.certificate_lifetime)
    renew_before = lifetime * (1 - spec.tls.renewal_fraction)
    return {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": _metadata(spec, manifests.cert_manager_certificate_name(spec), "certificates"),
        "spec": {
            "secretName": manifests.cert_manager_secret_name(spec),
            "issuerRef": {"name": issuer.name, "kind": issuer.kind, "group": issuer.group},
            "commonName": f"{manifests.headless_service_name(spec)}.{spec.namespace}.svc",
            "dnsNames": manifests.wildcard_dns_names(spec),
            "duration": f"{int(lifetime.total_seconds())}s",
            "renewBefore": f"{int(renew_before.total_seconds())}s",
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
            "usages": ["server auth", "client auth", "digital signature", "key encipherment"],
        },
    }


# ---- tokens ------------------------------------------------------------------------------------------
def token_secret(spec: ClusterSpec, suffix: str, token: str) -> Manifest:
    """`<cluster>-admin`, `-client` or `-reader`, key `token`. Created once; delete it to rotate the token."""
    return _secret(spec, manifests.token_secret_name(spec, suffix), {manifests.TOKEN_KEY: token.encode()}, "token")


def tokens_file_secret(spec: ClusterSpec, tokens: Mapping[str, str]) -> Manifest:
    """The sidecar's `http.auth.tokens_file`: one `ROLE TOKEN` line per token Secret (suffix -> token)."""
    lines = [f"{manifests.TOKEN_ROLES[suffix]} {token}" for suffix, token in sorted(tokens.items())]
    data = {manifests.TOKENS_KEY: ("\n".join(lines) + "\n").encode()}
    return _secret(spec, manifests.tokens_file_secret_name(spec), data, "token")


# ---- network policy ----------------------------------------------------------------------------------
def operator_peer(namespace: str | None, pod_labels: Mapping[str, str]) -> dict[str, Any] | None:
    """The operator's pods as a NetworkPolicy peer; None when unknown (an operator outside the cluster)."""
    if not namespace or not pod_labels:
        return None
    return {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "podSelector": {"matchLabels": dict(pod_labels)},
    }


def client_peers(spec: ClusterSpec) -> list[dict[str, Any]]:
    if spec.client_access is not None:
        return [dict(peer) for peer in spec.client_access]
    return [{"podSelector": {"matchLabels": {CLIENT_LABEL: spec.name}}}]


def network_policy(spec: ClusterSpec, operator: Mapping[str, Any] | None) -> Manifest | None:
    """Transport port: the cluster's own pods only. Client port: those, the audit job, the operator, the
    `spec.clientAccess` peers and the `spec.metricsAccess` peers (Prometheus). Egress is left open (DNS, peers' published addresses). The kubelet's probes
    come from the node, which NetworkPolicy implementations admit."""
    if not spec.network_policy_enabled:
        return None
    nodes = {"podSelector": {"matchLabels": manifests.common_labels(spec)}}
    audit = {"podSelector": {"matchLabels": manifests.audit_labels(spec)}}
    client_from = [
        nodes,
        audit,
        *([dict(operator)] if operator else []),
        *client_peers(spec),
        *(dict(peer) for peer in spec.metrics_access),
    ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(spec, manifests.network_policy_name(spec), "node"),
        "spec": {
            "podSelector": {"matchLabels": manifests.common_labels(spec)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [nodes], "ports": [{"protocol": "TCP", "port": TRANSPORT_PORT}]},
                {"from": client_from, "ports": [{"protocol": "TCP", "port": HTTP_PORT}]},
            ],
        },
    }


def validate_security(spec: ClusterSpec) -> list[str]:
    """What the CRD's schema cannot check: durations and how they relate (the operator's own check)."""
    problems: list[str] = []
    try:
        lifetime = certificates.parse_duration(spec.tls.certificate_lifetime)
        ca_lifetime = certificates.parse_duration(spec.tls.ca_lifetime)
    except ValueError as error:
        return [f"tls: {error}"]
    if not 0.1 <= spec.tls.renewal_fraction <= 0.9:
        problems.append(f"tls.renewalFraction ({spec.tls.renewal_fraction}) must be between 0.1 and 0.9")
    # The kubelet may take a couple of minutes to project a renewed Secret into the pods.
    window = lifetime * (1 - spec.tls.renewal_fraction)
    if window < datetime.timedelta(minutes=3):
        problems.append(
            f"tls: certificates are renewed {int(window.total_seconds())}s before they expire; give at least 180s "
            "(a longer certificateLifetime or a smaller renewalFraction) so pods see the new files in time"
        )
    if ca_lifetime < lifetime * 2:
        problems.append("tls.caLifetime must be at least twice tls.certificateLifetime")
    if not spec.tls.enabled and spec.tls.issuer_ref is not None:
        problems.append("tls.issuerRef is set but tls.enabled is false")
    return problems
