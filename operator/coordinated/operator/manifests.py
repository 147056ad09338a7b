"""Pure builders: a ClusterSpec (plus a few observed facts) in, Kubernetes manifests as dicts out.

Nothing here talks to the API server, so every manifest is unit-tested without a cluster. All objects
carry a controller owner reference to the CoordinatedCluster, so deleting it garbage-collects them.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from coordinated.coordination.formation import INITIAL_MASTER_NODES
from coordinated.coordination.peer_finder import SEED_HOSTS
from coordinated.coordination.settings import CLUSTER_NAME, NODE_ROLES
from coordinated.operator import API_VERSION, KIND, object_storage, placement
from coordinated.operator.sidecar_client import HTTP_PORT, TRANSPORT_PORT
from coordinated.operator.spec import ClusterSpec
from coordinated.sidecar.auth import service_accounts_settings
from coordinated.sidecar.features.snapshot_settings import PATH_REPO
from coordinated.sidecar.peers.auth_settings import SECRET_FILE
from coordinated.sidecar.peers.tls_settings import (
    HTTP_SSL_CLIENT_AUTHENTICATION,
    HTTP_TLS,
    TRANSPORT_SSL_TRUST_RESTRICTIONS,
    TRANSPORT_TLS,
)
from coordinated.sidecar.web.access_settings import TOKENS_FILE

Manifest = dict[str, Any]

SIDECAR_CONTAINER = "sidecar"
DATA_DIR = "/data"
TRANSPORT_SECRET_DIR = "/etc/coordinated/transport"
TRANSPORT_SECRET_KEY = "secret"
BOOTSTRAP_KEY = "initial_master_nodes"
INITIAL_MASTER_NODES_ENV = "COORDINATED_INITIAL_MASTER_NODES"
RUN_AS_USER = 10001  # the image's non-root user
DATA_VOLUME = "data"  # the claim template's name: claims are named data-<statefulset>-<ordinal>

# Security material, mounted read-only. The CA's key is never mounted: only the operator signs.
TLS_DIR = "/etc/coordinated/tls"
TOKENS_DIR = "/etc/coordinated/tokens"
TOKENS_KEY = "tokens"  # the tokens file: one `ROLE TOKEN` line per role
TOKEN_KEY = "token"  # the key of each role's token Secret
CA_CERT_KEY = "ca.crt"
CA_KEY_KEY = "ca.key"
BUILTIN_TLS = "builtin"  # the operator's own CA signs one certificate per pod
CERT_MANAGER_TLS = "cert-manager"  # a cert-manager Issuer signs one certificate for every pod
TOKEN_ROLES = {"admin": "admin", "client": "writer", "reader": "reader"}  # Secret suffix -> role
# The Kubernetes API server's signing keys (its JWKS and issuer), which the sidecars verify ServiceAccount tokens
# against: a ConfigMap the operator keeps up to date (reconcile/service_account_keys.py).
SERVICE_ACCOUNT_KEYS_DIR = "/etc/coordinated/service-account-keys"
SERVICE_ACCOUNT_KEYS_KEY = "keys.json"
SERVICE_ACCOUNT_KEYS_VOLUME = "service-account-keys"


# ---- names -------------------------------------------------------------------------------------------
def statefulset_name(spec: ClusterSpec) -> str:
    return spec.name


def nonvoter_statefulset_name(spec: ClusterSpec) -> str:
    """The pool of nodes that never vote (spec.votingReplicas): pods NAME-nonvoter-0, -1, ..."""
    return f"{spec.name}-nonvoter"


def headless_service_name(spec: ClusterSpec) -> str:
    return f"{spec.name}-headless"


def client_service_name(spec: ClusterSpec) -> str:
    return spec.name


def transport_secret_name(spec: ClusterSpec) -> str:
    return f"{spec.name}-transport"


def ca_secret_name(spec: ClusterSpec) -> str:
    return f"{spec.name}-ca"


def certificates_secret_name(spec: ClusterSpec) -> str:
    return f"{spec.name}-certs"


def cert_manager_secret_name(spec: ClusterSpec) -> str:
    return f"{spec.name}-cert-manager-tls"


def cert_manager_certificate_name(spec: ClusterSpec) -> str:
    return f"{spec.name}-tls"


def token_secret_name(spec: ClusterSpec, suffix: str) -> str:
    """`<cluster>-admin` (the operator's), `<cluster>-client` (applications'), `<cluster>-reader` (the audit's)."""
    return f"{spec.name}-{suffix}"


def tokens_file_secret_name(spec: ClusterSpec) -> str:
    return f"{spec.name}-tokens"


def service_account_keys_configmap_name(spec: ClusterSpec) -> str:
    return f"{spec.name}-service-account-keys"


def service_account_audience(spec: ClusterSpec) -> str | None:
    """The audience of the ServiceAccount tokens the sidecars accept (spec.access.serviceAccounts, default
    `coordinated.dev/NAMESPACE/NAME`: this cluster's own); None when they accept none (tokens off, or turned
    off)."""
    if not spec.auth_enabled or not spec.access.service_accounts.enabled:
        return None
    return spec.access.service_accounts.audience or f"coordinated.dev/{spec.namespace}/{spec.name}"


def network_policy_name(spec: ClusterSpec) -> str:
    return spec.name


def bootstrap_configmap_name(spec: ClusterSpec) -> str:
    return f"{spec.name}-bootstrap"


def audit_cronjob_name(spec: ClusterSpec) -> str:
    return f"{spec.name}-audit"


def pod_name(spec: ClusterSpec, ordinal: int) -> str:
    return f"{statefulset_name(spec)}-{ordinal}"


def pod_names(spec: ClusterSpec, replicas: int) -> tuple[str, ...]:
    return tuple(pod_name(spec, ordinal) for ordinal in range(replicas))


def nonvoter_pod_names(spec: ClusterSpec, replicas: int) -> tuple[str, ...]:
    return tuple(f"{nonvoter_statefulset_name(spec)}-{ordinal}" for ordinal in range(replicas))


def ordinal_of(pod: str) -> int:
    return int(pod.rsplit("-", 1)[1])


def seed_hosts(spec: ClusterSpec) -> str:
    # The headless Service resolves to every pod, ready or not (publishNotReadyAddresses), which is
    # what discovery needs before any cluster has formed.
    return f"{headless_service_name(spec)}.{spec.namespace}.svc:{TRANSPORT_PORT}"


def pod_dns_name(spec: ClusterSpec, pod: str) -> str:
    """The pod's stable name under the headless Service; the operator verifies its certificate against it."""
    return f"{pod}.{headless_service_name(spec)}.{spec.namespace}.svc"


def service_dns_names(spec: ClusterSpec) -> list[str]:
    """Every name clients use for the client Service, short and long, plus the headless Service (seeds)."""
    names = []
    for service in (client_service_name(spec), headless_service_name(spec)):
        names += [service, f"{service}.{spec.namespace}", f"{service}.{spec.namespace}.svc"]
        names.append(f"{service}.{spec.namespace}.svc.cluster.local")
    return names


def pod_certificate_dns_names(spec: ClusterSpec, pod: str) -> list[str]:
    """The SANs of one pod's certificate: its own stable names first, then the Services'. No IPs: pods are
    verified by name (the operator) or by chain only (peers on the transport)."""
    own = pod_dns_name(spec, pod)
    return [own, f"{own}.cluster.local", f"{pod}.{headless_service_name(spec)}", *service_dns_names(spec)]


def wildcard_dns_names(spec: ClusterSpec) -> list[str]:
    """The SANs of the one certificate cert-manager issues for every pod of the cluster."""
    headless = f"{headless_service_name(spec)}.{spec.namespace}.svc"
    return [f"*.{headless}", f"*.{headless}.cluster.local", *service_dns_names(spec)]


# ---- labels and metadata -----------------------------------------------------------------------------
def selector_labels(spec: ClusterSpec) -> dict[str, str]:
    return {"app.kubernetes.io/name": "coordinated-cluster", "app.kubernetes.io/instance": spec.name}


def selector_string(spec: ClusterSpec) -> str:
    """The StatefulSet's selector; it also matches the data claims (their template carries these labels)."""
    return _label_string(selector_labels(spec))


def node_selector_labels(spec: ClusterSpec) -> dict[str, str]:
    """The cluster's nodes, and nothing else: the Services, the disruption budget and the operator select by these."""
    return {**selector_labels(spec), "app.kubernetes.io/component": "node"}


def node_selector_string(spec: ClusterSpec) -> str:
    """The pods the operator observes, and the scale subresource's status.selector."""
    return _label_string(node_selector_labels(spec))


def _label_string(labels: Mapping[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def audit_labels(spec: ClusterSpec) -> dict[str, str]:
    """The audit job's pods. Not the cluster's `app.kubernetes.io/name`: a selector of the cluster's nodes (the
    StatefulSet's, kept for compatibility, is only name and instance) must never count a finished audit pod."""
    return {
        "app.kubernetes.io/name": "coordinated-audit",
        "app.kubernetes.io/instance": spec.name,
        "app.kubernetes.io/component": "audit",
        "app.kubernetes.io/managed-by": "coordinated-operator",
    }


def common_labels(spec: ClusterSpec, component: str = "node") -> dict[str, str]:
    return {
        **selector_labels(spec),
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": "coordinated-operator",
    }


def owner_reference(spec: ClusterSpec) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": spec.name,
        "uid": spec.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def object_metadata(spec: ClusterSpec, name: str, component: str = "node") -> dict[str, Any]:
    """A child's metadata: in the cluster's namespace, labelled, and owned by the cluster (deleted with it)."""
    return {
        "name": name,
        "namespace": spec.namespace,
        "labels": common_labels(spec, component),
        "ownerReferences": [owner_reference(spec)],
    }


_metadata = object_metadata


# ---- builders ----------------------------------------------------------------------------------------
def headless_service(spec: ClusterSpec) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec, headless_service_name(spec)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": node_selector_labels(spec),
            "ports": [
                {"name": "transport", "port": TRANSPORT_PORT, "targetPort": "transport"},
                {"name": "http", "port": HTTP_PORT, "targetPort": "http"},
            ],
        },
    }


def client_service(spec: ClusterSpec) -> Manifest:
    # Only ready pods (joined to a cluster with a master) receive client traffic.
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec, client_service_name(spec)),
        "spec": {
            "type": "ClusterIP",
            "selector": node_selector_labels(spec),
            "ports": [{"name": "http", "port": HTTP_PORT, "targetPort": "http"}],
        },
    }


def service_account(spec: ClusterSpec) -> Manifest:
    # The sidecar needs no Kubernetes API access, so no token is mounted.
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _metadata(spec, spec.name),
        "automountServiceAccountToken": False,
    }


def transport_secret(spec: ClusterSpec, secret_value: str) -> Manifest:
    """`secret_value` is generated once by the caller; an existing Secret is never rotated."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _metadata(spec, transport_secret_name(spec)),
        "data": {TRANSPORT_SECRET_KEY: base64.b64encode(secret_value.encode()).decode()},
    }


def bootstrap_configmap(spec: ClusterSpec, initial_master_nodes: tuple[str, ...]) -> Manifest:
    """Pods read `cluster.initial_master_nodes` from here at start-up, through an environment variable.

    Emptying it after the bootstrap does not restart any pod (unlike editing the pod template), and a
    pod that restarts later no longer carries the setting, so it can never bootstrap a second cluster.
    """
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(spec, bootstrap_configmap_name(spec)),
        "data": {BOOTSTRAP_KEY: ",".join(initial_master_nodes)},
    }


def service_account_keys_configmap(spec: ClusterSpec, keys_document: str) -> Manifest:
    """The API server's signing keys for the sidecars (`http.auth.kubernetes.keys_file`): public keys only."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(spec, service_account_keys_configmap_name(spec)),
        "data": {SERVICE_ACCOUNT_KEYS_KEY: keys_document},
    }


def security_settings(spec: ClusterSpec, tls_source: str | None) -> dict[str, str]:
    """The sidecar's TLS and token settings, all pointing at mounted Secret files the sidecar re-reads."""
    settings: dict[str, str] = {}
    if tls_source is not None:
        if tls_source == CERT_MANAGER_TLS:
            certificate, key = f"{TLS_DIR}/tls.crt", f"{TLS_DIR}/tls.key"
        else:  # one certificate per pod in one Secret; Kubernetes expands $(POD_NAME) at container start
            certificate, key = f"{TLS_DIR}/$(POD_NAME).crt", f"{TLS_DIR}/$(POD_NAME).key"
        for port in (TRANSPORT_TLS, HTTP_TLS):
            settings[port.enabled.name] = "true"
            settings[port.certificate.name] = certificate
            settings[port.key.name] = key
            settings[port.certificate_authorities.name] = f"{TLS_DIR}/{CA_CERT_KEY}"
        settings[HTTP_SSL_CLIENT_AUTHENTICATION.name] = spec.tls.client_authentication
        # Only the pods' certificates are nodes': a client certificate from the same CA cannot join the transport.
        settings[TRANSPORT_SSL_TRUST_RESTRICTIONS.name] = f"*.{headless_service_name(spec)}.{spec.namespace}.svc"
    if spec.auth_enabled:
        settings[TOKENS_FILE.name] = f"{TOKENS_DIR}/{TOKENS_KEY}"
    if (audience := service_account_audience(spec)) is not None:
        settings[service_accounts_settings.AUDIENCE.name] = audience
        settings[service_accounts_settings.KEYS_FILE.name] = f"{SERVICE_ACCOUNT_KEYS_DIR}/{SERVICE_ACCOUNT_KEYS_KEY}"
    return settings


SNAPSHOT_DIR = "/snapshots"  # where the snapshot volume is mounted, and the pods' path.repo
SNAPSHOT_VOLUME = "snapshots"


def snapshot_claim_name(spec: ClusterSpec) -> str | None:
    """The claim of the snapshot volume: the one spec.snapshots names, else <name>-snapshots."""
    if spec.snapshots is None or not spec.snapshot_volume:
        return None
    return spec.snapshots.claim_name or f"{spec.name}-snapshots"


def snapshot_claim(spec: ClusterSpec) -> Manifest | None:
    """The claim the operator creates when spec.snapshots names none. It has no owner: like the data claims
    kept on deletion, it outlives the cluster, so that a new cluster can restore from it (spec.restoreFrom)."""
    if spec.snapshots is None or not spec.snapshot_volume or spec.snapshots.claim_name:
        return None
    claim: Manifest = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": snapshot_claim_name(spec),
            "namespace": spec.namespace,
            # Not the instance label: deleting a cluster's claims by its selector must not take its snapshots.
            "labels": {
                "app.kubernetes.io/name": "coordinated-cluster",
                "app.kubernetes.io/component": "snapshots",
                "app.kubernetes.io/managed-by": "coordinated-operator",
                "coordinated.dev/snapshots-of": spec.name,
            },
        },
        "spec": {
            "accessModes": [spec.snapshots.access_mode],
            "resources": {"requests": {"storage": spec.snapshots.size}},
        },
    }
    if spec.snapshots.storage_class_name:
        claim["spec"]["storageClassName"] = spec.snapshots.storage_class_name
    return claim


def sidecar_args(spec: ClusterSpec, tls_source: str | None = None, voting: bool = True) -> list[str]:
    """A voting node is master-eligible (node.roles defaults to master) and may bootstrap; a non-voting one has
    no role (`node.roles=[]`): it never votes, is never elected, and never bootstraps."""
    role: dict[str, str] = (
        # Kubernetes expands $(VAR) when the container starts; the ConfigMap may hold an empty list.
        {INITIAL_MASTER_NODES.name: f"$({INITIAL_MASTER_NODES_ENV})"} if voting else {NODE_ROLES.name: "[]"}
    )
    settings: dict[str, str] = {
        **security_settings(spec, tls_source),
        **({PATH_REPO.name: SNAPSHOT_DIR} if spec.snapshot_volume else {}),
        **object_storage.client_settings(spec),
        **{key: value for key, value in spec.settings.items()},
        CLUSTER_NAME.name: spec.cluster_name,
        SEED_HOSTS.name: seed_hosts(spec),
        SECRET_FILE.name: f"{TRANSPORT_SECRET_DIR}/{TRANSPORT_SECRET_KEY}",
        **role,
    }
    args = ["node", "--name", "$(POD_NAME)", "--data-dir", DATA_DIR, "--host", "$(POD_IP)"]
    args += ["--http-port", str(HTTP_PORT), "--transport-port", str(TRANSPORT_PORT)]
    for key in sorted(settings):
        args += ["-E", f"{key}={settings[key]}"]
    return args


def _sidecar_container(spec: ClusterSpec, tls_source: str | None, voting: bool = True) -> dict[str, Any]:
    # The kubelet's HTTPS probes do not verify the certificate; /healthz and /readyz need no token.
    scheme = "HTTPS" if tls_source is not None else "HTTP"
    mounts: list[dict[str, Any]] = [
        {"name": "data", "mountPath": DATA_DIR},
        {"name": "transport-secret", "mountPath": TRANSPORT_SECRET_DIR, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    if tls_source is not None:
        mounts.append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
    if spec.auth_enabled:
        mounts.append({"name": "tokens", "mountPath": TOKENS_DIR, "readOnly": True})
    if service_account_audience(spec) is not None:
        mounts.append({"name": SERVICE_ACCOUNT_KEYS_VOLUME, "mountPath": SERVICE_ACCOUNT_KEYS_DIR, "readOnly": True})
    if spec.snapshot_volume:
        mounts.append({"name": SNAPSHOT_VOLUME, "mountPath": SNAPSHOT_DIR})
    container: dict[str, Any] = {
        "name": SIDECAR_CONTAINER,
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "args": sidecar_args(spec, tls_source, voting),
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            *(
                [
                    {
                        "name": INITIAL_MASTER_NODES_ENV,
                        "valueFrom": {
                            "configMapKeyRef": {"name": bootstrap_configmap_name(spec), "key": BOOTSTRAP_KEY}
                        },
                    }
                ]
                if voting
                else []
            ),
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            *object_storage.credential_env(spec),
        ],
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "transport", "containerPort": TRANSPORT_PORT, "protocol": "TCP"},
        ],
        # Ready means "joined a cluster that has a master"; it gates the client Service and rollouts.
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": "http", "scheme": scheme},
            "periodSeconds": 5,
            "failureThreshold": 3,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "http", "scheme": scheme},
            "initialDelaySeconds": 10,
            "periodSeconds": 10,
            "failureThreshold": 6,
        },
        "volumeMounts": mounts,
        "securityContext": CONTAINER_SECURITY_CONTEXT,
    }
    if spec.resources:
        container["resources"] = dict(spec.resources)
    return container


# Every container the operator writes runs like this; the pod adds non-root and seccomp RuntimeDefault.
CONTAINER_SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


def _user_containers(spec: ClusterSpec, tls_source: str | None) -> list[dict[str, Any]]:
    """Application containers reach their sidecar on the pod's loopback listener (plain HTTP, in the pod only)
    when TLS is on, else on the pod IP; with tokens on they get the writer token in COORDINATED_TOKEN."""
    host = "127.0.0.1" if tls_source is not None else "$(POD_IP)"
    ours: list[dict[str, Any]] = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "COORDINATED_URL", "value": f"http://{host}:{HTTP_PORT}"},
    ]
    if spec.auth_enabled:
        ours.append(
            {
                "name": "COORDINATED_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": token_secret_name(spec, "client"), "key": TOKEN_KEY}},
            }
        )
    names = {entry["name"] for entry in ours}
    containers = []
    for container in spec.template.get("containers") or ():
        env = [entry for entry in container.get("env") or () if entry.get("name") not in names]
        containers.append({**container, "env": [*ours, *env]})
    return containers


def _security_volumes(spec: ClusterSpec, tls_source: str | None) -> list[dict[str, Any]]:
    # 0440: readable by the pod's user and fsGroup only. A projected Secret is updated in place by the
    # kubelet (an atomic symlink swap of the whole directory), so a certificate and its key change together.
    volumes: list[dict[str, Any]] = []
    if tls_source is not None:
        secret = cert_manager_secret_name(spec) if tls_source == CERT_MANAGER_TLS else certificates_secret_name(spec)
        volumes.append({"name": "tls", "secret": {"secretName": secret, "defaultMode": 0o440}})
    if spec.auth_enabled:
        volumes.append(
            {"name": "tokens", "secret": {"secretName": tokens_file_secret_name(spec), "defaultMode": 0o440}}
        )
    if service_account_audience(spec) is not None:
        # Optional: a pod starts before the operator could read the keys (the realm then says so in health).
        configmap = {"name": service_account_keys_configmap_name(spec), "defaultMode": 0o440, "optional": True}
        volumes.append({"name": SERVICE_ACCOUNT_KEYS_VOLUME, "configMap": configmap})
    return volumes


def statefulset(
    spec: ClusterSpec,
    replicas: int,
    tls_source: str | None = None,
    claim_size: str | None = None,
    *,
    voting: bool = True,
    keep_claims: bool = False,
    priority_class_name: str | None = None,
) -> Manifest:
    """One pool's StatefulSet: the voters' (`NAME`), or with `voting=False` the non-voters' (`NAME-nonvoter`).

    `replicas` comes from the planner, not straight from the spec: scaling moves one node at a time.
    `claim_size` likewise comes from volumes.py: a claim template cannot change, so it is the spec's size only
    once the StatefulSet can be created with it. `keep_claims` (hibernation) keeps the claims of the pods a
    scale-down stops, whatever storage.persistentVolumeClaimRetentionPolicy.whenScaled says.
    `priority_class_name`: the non-preempting twin of the spec's class (placement.pod_priority_class)."""
    template_metadata = spec.template.get("metadata") or {}
    pod_labels = {
        **(template_metadata.get("labels") or {}),
        **common_labels(spec),
        placement.VOTING_LABEL: "true" if voting else "false",
    }
    # The voters' selector is the one StatefulSets always had (immutable); the non-voters' narrows it. The
    # voters' also matches non-voting pods, but a StatefulSet never adopts another controller's pods.
    selector = selector_labels(spec) if voting else {**selector_labels(spec), placement.VOTING_LABEL: "false"}
    volume_claim: dict[str, Any] = {
        "metadata": {"name": DATA_VOLUME, "labels": selector_labels(spec)},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": claim_size or spec.storage.size}},
        },
    }
    if spec.storage.storage_class_name:
        volume_claim["spec"]["storageClassName"] = spec.storage.storage_class_name
    pod_spec: dict[str, Any] = {
        "serviceAccountName": object_storage.service_account(spec) or spec.name,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 60,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "runAsGroup": RUN_AS_USER,
            "fsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        **placement.scheduling_fields(spec, selector_labels(spec), voting, priority_class_name),
        "containers": [_sidecar_container(spec, tls_source, voting), *_user_containers(spec, tls_source)],
        "volumes": [
            {"name": "transport-secret", "secret": {"secretName": transport_secret_name(spec), "defaultMode": 0o440}},
            {"name": "tmp", "emptyDir": {}},
            *_security_volumes(spec, tls_source),
            *(
                [{"name": SNAPSHOT_VOLUME, "persistentVolumeClaim": {"claimName": snapshot_claim_name(spec)}}]
                if spec.snapshot_volume
                else []
            ),
            *(spec.template.get("volumes") or ()),
        ],
    }
    if spec.template.get("initContainers"):
        pod_spec["initContainers"] = list(spec.template["initContainers"])
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _metadata(spec, statefulset_name(spec) if voting else nonvoter_statefulset_name(spec)),
        "spec": {
            "replicas": replicas,
            "serviceName": headless_service_name(spec),
            "selector": {"matchLabels": selector},
            # Parallel: bootstrap needs every initial master-eligible pod up before any of them is
            # ready; OrderedReady would wait forever for pod 0. The operator paces scaling itself.
            "podManagementPolicy": "Parallel",
            # Voters, OnDelete: the operator replaces pods itself after a template change, one at a time,
            # master last, each only while the cluster is green with its voting configuration intact
            # (planner.py). Non-voters hold no vote: the StatefulSet controller rolls them, one at a time.
            "updateStrategy": {"type": "OnDelete"} if voting else {"type": "RollingUpdate"},
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": spec.storage.when_deleted,
                "whenScaled": "Retain" if keep_claims else spec.storage.when_scaled,
            },
            "template": {
                "metadata": {
                    "labels": pod_labels,
                    "annotations": dict(template_metadata.get("annotations") or {}),
                },
                "spec": pod_spec,
            },
            "volumeClaimTemplates": [volume_claim],
        },
    }


def template_hash(statefulset_manifest: Manifest) -> str:
    """A short, stable name for a StatefulSet's pod template: equal templates, equal names."""
    text = json.dumps(statefulset_manifest["spec"]["template"], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def disruptions_allowed(health: str | None, voters: int) -> int:
    """One voluntary disruption only while the cluster is green and has at least 3 voters.

    With 3 or more voters, losing one still leaves a quorum; with fewer, or while the cluster is already
    unhealthy, an eviction could take away the quorum, so evictions wait.
    """
    return 1 if health == "green" and voters >= 3 else 0


def pod_disruption_budget(spec: ClusterSpec, health: str | None, voters: int) -> Manifest | None:
    """None when the user disabled the budget (the caller then deletes any that exists)."""
    budget = spec.disruption_budget
    if budget.mode == "Disabled":
        return None
    # The voters only: a non-voting node's disruption costs no vote.
    pdb_spec: dict[str, Any] = {"selector": placement.pool_selector(node_selector_labels(spec), voting=True)}
    if budget.mode == "Custom":
        if budget.min_available is not None:
            pdb_spec["minAvailable"] = budget.min_available
        else:
            pdb_spec["maxUnavailable"] = budget.max_unavailable if budget.max_unavailable is not None else 1
    else:
        pdb_spec["maxUnavailable"] = disruptions_allowed(health, voters)
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(spec, spec.name),
        "spec": pdb_spec,
    }


# `coordinated audit`'s exit codes: 1 violations, 2 unusable input, 3 the audit did not complete.
AUDIT_VERDICT_EXIT_CODES = (1, 2)
AUDIT_INCOMPLETE_EXIT_CODE = 3


def audit_failure_policy() -> dict[str, Any]:
    """How the audit Job treats its pod's exit code. Violations (1) and unusable input (2) are what the audit
    found: a second run would find the same, so the Job fails at once (reason `PodFailurePolicy`). An audit that
    did not complete (3: Spark or its JVM failed, out of memory say) judged nothing and is run again within
    `backoffLimit` (then reason `BackoffLimitExceeded`); so is a pod evicted or preempted, without counting."""
    return {
        "rules": [
            {
                "action": "FailJob",
                "onExitCodes": {"containerName": "audit", "operator": "In", "values": list(AUDIT_VERDICT_EXIT_CODES)},
            },
            {
                "action": "Count",
                "onExitCodes": {"containerName": "audit", "operator": "In", "values": [AUDIT_INCOMPLETE_EXIT_CODE]},
            },
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        ]
    }


def audit_cronjob(
    spec: ClusterSpec, replicas: int, tls_source: str | None = None, nonvoters: int = 0
) -> Manifest | None:
    """A CronJob that audits every node's history (`coordinated audit --from-cluster`), with Spark.

    Histories live on each node's own volume, which no other pod can mount, so the audit reads them over
    HTTP (`GET /_history`) through each pod's stable DNS name under the headless Service. With TLS on, the
    job trusts the cluster's CA (SSL_CERT_FILE: only `ca.crt` is mounted, never a pod's key); with tokens on,
    it gets the reader token in COORDINATED_TOKEN.
    """
    audit = spec.audit
    if not audit.enabled:
        return None
    archived = object_storage.audit_source(spec)
    if archived is not None:
        # The archive, incrementally: only what is newer than the checkpoint kept beside it in the bucket.
        source, checkpoint = archived
        args = ["audit", source, "--checkpoint", checkpoint, *object_storage.audit_args(spec)]
        tls_source = None  # no sidecar is asked
    else:
        scheme = "https" if tls_source is not None else "http"
        pods = (*pod_names(spec, max(replicas, 1)), *nonvoter_pod_names(spec, nonvoters))
        urls = ",".join(f"{scheme}://{pod_dns_name(spec, pod)}:{HTTP_PORT}" for pod in pods)
        args = ["audit", "--from-cluster", urls]
    args += ["--spark-master", audit.spark_master, "--report-dir", "/reports"]
    for key, value in sorted(audit.spark_conf.items()):
        args += ["--conf", f"{key}={value}"]
    container: dict[str, Any] = {
        "name": "audit",
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "args": args,
        "volumeMounts": [{"name": "reports", "mountPath": "/reports"}, {"name": "tmp", "mountPath": "/tmp"}],
        # Spark writes outside /tmp (its work and Ivy directories), so the root filesystem stays writable here.
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {}}]
    env: list[dict[str, Any]] = []
    if tls_source is not None:
        secret = cert_manager_secret_name(spec) if tls_source == CERT_MANAGER_TLS else certificates_secret_name(spec)
        items = [{"key": CA_CERT_KEY, "path": CA_CERT_KEY}]
        volumes.append({"name": "ca", "secret": {"secretName": secret, "items": items, "defaultMode": 0o440}})
        container["volumeMounts"].append({"name": "ca", "mountPath": TLS_DIR, "readOnly": True})
        env.append({"name": "SSL_CERT_FILE", "value": f"{TLS_DIR}/{CA_CERT_KEY}"})
        # Read once by the driver and shipped to the tasks that fetch, wherever Spark runs them.
        args += ["--ca-file", f"{TLS_DIR}/{CA_CERT_KEY}"]
    if spec.auth_enabled and archived is None:
        reader = {"secretKeyRef": {"name": token_secret_name(spec, "reader"), "key": TOKEN_KEY}}
        env.append({"name": "COORDINATED_TOKEN", "valueFrom": reader})
    if archived is not None:
        env += object_storage.credential_env(spec)
    if env:
        container["env"] = env
    if audit.resources:
        container["resources"] = dict(audit.resources)
    reports: dict[str, Any] = (
        {"persistentVolumeClaim": {"claimName": audit.report_volume_claim}}
        if audit.report_volume_claim
        else {"emptyDir": {}}
    )
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": _metadata(spec, audit_cronjob_name(spec), component="audit"),
        "spec": {
            "schedule": audit.schedule,
            "suspend": spec.hibernating,  # no node to audit while the cluster sleeps
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "spec": {
                    "backoffLimit": 1,
                    "podFailurePolicy": audit_failure_policy(),
                    "template": {
                        "metadata": {"labels": audit_labels(spec)},
                        "spec": {
                            "restartPolicy": "Never",
                            "serviceAccountName": object_storage.service_account(spec) or spec.name,
                            "automountServiceAccountToken": False,
                            "securityContext": {
                                "runAsNonRoot": True,
                                "runAsUser": RUN_AS_USER,
                                "fsGroup": RUN_AS_USER,
                                "seccompProfile": {"type": "RuntimeDefault"},
                            },
                            "containers": [container],
                            "volumes": [{"name": "reports", **reports}, *volumes],
                        },
                    },
                }
            },
        },
    }


def tls_source_of(spec: ClusterSpec, cert_manager_available: bool) -> str | None:
    """Who signs the pods' certificates: None when TLS is off; cert-manager only where it is installed."""
    if not spec.tls.enabled:
        return None
    if spec.tls.issuer_ref is not None and cert_manager_available:
        return CERT_MANAGER_TLS
    return BUILTIN_TLS


def desired_children(
    spec: ClusterSpec,
    *,
    replicas: int,
    initial_master_nodes: tuple[str, ...],
    health: str | None,
    voters: int,
    tls_source: str | None = None,
    claim_size: str | None = None,
    nonvoters: int | None = None,
    nonvoter_claim_size: str | None = None,
    keep_claims: bool = False,
    priority_class_name: str | None = None,
) -> list[Manifest]:
    """Everything the operator re-applies each pass; the Secrets (security.py) are written apart. `nonvoters`:
    the non-voters' StatefulSet size (None: it is neither wanted nor there)."""
    manifests: list[Manifest | None] = [
        service_account(spec),
        headless_service(spec),
        client_service(spec),
        bootstrap_configmap(spec, initial_master_nodes),
        statefulset(
            spec, replicas, tls_source, claim_size, keep_claims=keep_claims, priority_class_name=priority_class_name
        ),
        (
            statefulset(
                spec,
                nonvoters,
                tls_source,
                nonvoter_claim_size,
                voting=False,
                keep_claims=keep_claims,
                priority_class_name=priority_class_name,
            )
            if nonvoters is not None
            else None
        ),
        pod_disruption_budget(spec, health, voters),
        audit_cronjob(spec, replicas, tls_source, nonvoters or 0),
    ]
    return [manifest for manifest in manifests if manifest is not None]


def kinds_by_name(manifests: list[Manifest]) -> Mapping[tuple[str, str], Manifest]:
    return {(manifest["kind"], manifest["metadata"]["name"]): manifest for manifest in manifests}
