"""The PodMonitor of one cluster's sidecars (the Prometheus Operator's), made by the operator from the cluster
resource, as CloudNativePG and Strimzi do: a new cluster is scraped with its own CA and token, with no change
to the operator's installation. Pure: the spec in, the manifest out.

Each cluster's PodMonitor lives in the cluster's namespace, because the Prometheus Operator reads a scrape's CA
and bearer token only from Secrets in the PodMonitor's namespace, and each cluster has its own. With TLS on it
scrapes https, checking the certificate against the client Service's name (every pod's certificate, and
cert-manager's one for all pods, carry it; Prometheus scrapes pod IPs, which no certificate names); with tokens
on it sends the reader token. Series are labelled by pod and cluster, never by pod IP, so a restarted pod
continues its series.
"""

from __future__ import annotations

from typing import Any

from coordinated.operator import manifests
from coordinated.operator.manifests import Manifest
from coordinated.operator.spec import ClusterSpec

API_VERSION = "monitoring.coreos.com/v1"
KIND = "PodMonitor"
JOB = "coordinated-sidecar"  # the alerts and the dashboard select the sidecars' series by it


def pod_monitor_name(spec: ClusterSpec) -> str:
    return f"{spec.name}-sidecars"


def relabelings() -> list[dict[str, Any]]:
    """job, and pod-named instance, pod, cluster and namespace labels; no label holds an address."""
    return [
        {"action": "replace", "targetLabel": "job", "replacement": JOB},
        {"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_name"], "targetLabel": "instance"},
        {"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_name"], "targetLabel": "pod"},
        {
            "action": "replace",
            "sourceLabels": ["__meta_kubernetes_pod_label_app_kubernetes_io_instance"],
            "targetLabel": "cluster",
        },
        {"action": "replace", "sourceLabels": ["__meta_kubernetes_namespace"], "targetLabel": "namespace"},
        {"action": "labeldrop", "regex": "(endpoint|container)"},
    ]


def pod_monitor(spec: ClusterSpec, tls_source: str | None, extra_labels: dict[str, str] | None = None) -> Manifest:
    """`tls_source`: who signs the pods' certificates (manifests.tls_source_of; None: TLS off)."""
    endpoint: dict[str, Any] = {
        "port": "http",
        "path": "/metrics",
        "interval": spec.monitoring.interval,
        "scrapeTimeout": spec.monitoring.scrape_timeout,
        "relabelings": relabelings(),
    }
    if tls_source is not None:
        secret = (
            manifests.cert_manager_secret_name(spec)
            if tls_source == manifests.CERT_MANAGER_TLS
            else manifests.certificates_secret_name(spec)
        )
        endpoint["scheme"] = "https"
        endpoint["tlsConfig"] = {
            "ca": {"secret": {"name": secret, "key": manifests.CA_CERT_KEY}},
            "serverName": f"{manifests.client_service_name(spec)}.{spec.namespace}.svc",
        }
    if spec.auth_enabled:
        # With tokens on, /metrics needs a token of any role: the cluster's reader token.
        reader = manifests.token_secret_name(spec, "reader")
        endpoint["authorization"] = {"type": "Bearer", "credentials": {"name": reader, "key": manifests.TOKEN_KEY}}
    metadata = manifests.object_metadata(spec, pod_monitor_name(spec), "monitoring")
    metadata["labels"] = {**(extra_labels or {}), **dict(spec.monitoring.labels), **metadata["labels"]}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": {
            "selector": {"matchLabels": manifests.node_selector_labels(spec)},
            "namespaceSelector": {"matchNames": [spec.namespace]},
            "podMetricsEndpoints": [endpoint],
        },
    }
