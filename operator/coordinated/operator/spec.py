"""The CoordinatedCluster resource as typed values, with the CRD's defaults repeated for robustness."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from coordinated.operator.access_spec import AccessSpec

DEFAULT_IMAGE = "coordinated-cluster:0.2.0"

# Annotations on the CoordinatedCluster; they hold what must survive an operator restart.
ANNOTATION_PREFIX = "coordinated.dev"
INITIAL_MASTER_NODES_ANNOTATION = f"{ANNOTATION_PREFIX}/initial-master-nodes"
CLUSTER_UUID_ANNOTATION = f"{ANNOTATION_PREFIX}/cluster-uuid"
PAUSE_ANNOTATION = f"{ANNOTATION_PREFIX}/pause"
ADOPTED_CLAIMS_ANNOTATION = f"{ANNOTATION_PREFIX}/adopted-claims"
# Any new value asks for one snapshot now (spec.snapshots); the restore done for spec.restoreFrom.
SNAPSHOT_REQUEST_ANNOTATION = f"{ANNOTATION_PREFIX}/snapshot-request"
RESTORED_FROM_ANNOTATION = f"{ANNOTATION_PREFIX}/restored-from"
# Hibernation (replicas: 0): how many voting nodes slept (set when they are stopped, dropped once they woke), and
# the snapshot taken just before, when the cluster has a snapshot volume.
HIBERNATED_VOTERS_ANNOTATION = f"{ANNOTATION_PREFIX}/hibernated-voters"
HIBERNATION_SNAPSHOT_ANNOTATION = f"{ANNOTATION_PREFIX}/hibernation-snapshot"


@dataclass(frozen=True)
class StorageSpec:
    size: str = "1Gi"
    storage_class_name: str | None = None
    when_deleted: str = "Retain"  # what happens to PVCs when the CoordinatedCluster is deleted
    when_scaled: str = "Delete"  # ... and when a node is removed by a scale-down


@dataclass(frozen=True)
class DisruptionBudgetSpec:
    mode: str = "Managed"  # Managed, Disabled or Custom
    min_available: int | str | None = None
    max_unavailable: int | str | None = None


@dataclass(frozen=True)
class AuditSpec:
    enabled: bool = False
    schedule: str = "0 3 * * *"
    spark_master: str = "local[*]"
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    resources: Mapping[str, Any] = field(default_factory=dict)
    report_volume_claim: str | None = None


@dataclass(frozen=True)
class S3Connection:
    """How the pods reach an S3-compatible service: the sidecars' `s3.client.default`. Credentials come from a
    Secret (keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, optionally AWS_SESSION_TOKEN) put in the
    environment, or from the pods' service account (a web-identity token, such as EKS's IRSA), never from
    settings."""

    endpoint: str | None = None  # None: AWS's endpoint for the region
    region: str | None = None  # None: us-east-1
    path_style_access: bool | None = None  # None: true with an endpoint (S3-compatible services), false for AWS
    credentials_secret: str | None = None
    service_account_name: str | None = None

    @property
    def path_style(self) -> bool:
        return self.endpoint is not None if self.path_style_access is None else self.path_style_access

    @classmethod
    def from_resource(cls, body: Mapping[str, Any]) -> S3Connection:
        credentials = body.get("credentials") or {}
        style = body.get("pathStyleAccess")
        return cls(
            endpoint=body.get("endpoint") or None,
            region=body.get("region") or None,
            path_style_access=None if style is None else bool(style),
            credentials_secret=credentials.get("secretName") or None,
            service_account_name=credentials.get("serviceAccountName") or None,
        )


@dataclass(frozen=True)
class BucketSpec:
    """A place in object storage: spec.archive (every node's closed history segments, under
    `bucket/base_path/CLUSTER_UUID/NODE_ID/`) or spec.snapshots.s3 (snapshots under `bucket/base_path/`)."""

    bucket: str
    base_path: str = ""
    connection: S3Connection = S3Connection()

    @classmethod
    def from_resource(cls, body: Mapping[str, Any]) -> BucketSpec:
        return cls(
            bucket=str(body.get("bucket") or ""),
            base_path=str(body.get("basePath") or "").strip("/"),
            connection=S3Connection.from_resource(body),
        )


@dataclass(frozen=True)
class SnapshotsSpec:
    """Snapshots into one volume mounted in every pod, or into a bucket (`s3`): on a schedule (cron, UTC), the
    newest `retention` kept."""

    schedule: str | None = None  # None: only on request (the snapshot-request annotation)
    retention: int = 7
    claim_name: str | None = None  # None: the operator creates <name>-snapshots
    size: str = "1Gi"
    storage_class_name: str | None = None
    access_mode: str = "ReadWriteOnce"
    s3: BucketSpec | None = None  # set: snapshots go to object storage, and there is no snapshot volume


@dataclass(frozen=True)
class IssuerRef:
    """A cert-manager issuer that signs the pods' certificate instead of the built-in CA."""

    name: str
    kind: str = "Issuer"
    group: str = "cert-manager.io"


@dataclass(frozen=True)
class TlsSpec:
    enabled: bool = True
    issuer_ref: IssuerRef | None = None
    certificate_lifetime: str = "2160h"  # 90 days
    renewal_fraction: float = 0.67  # renew once this share of the lifetime has passed
    ca_lifetime: str = "87600h"  # 10 years
    client_authentication: str = "none"  # http.ssl.client_authentication


@dataclass(frozen=True)
class SchedulingSpec:
    """Where the pods may run: given to the pod spec as written (placement.py merges the operator's defaults)."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    affinity: Mapping[str, Any] = field(default_factory=dict)
    topology_spread_constraints: tuple[Mapping[str, Any], ...] | None = None  # None: the operator's defaults
    priority_class_name: str | None = None


@dataclass(frozen=True)
class MonitoringSpec:
    """spec.monitoring.podMonitor: the operator's PodMonitor for the sidecars (monitoring.py)."""

    pod_monitor: bool | None = None  # None: as the operator's --pod-monitors says
    labels: Mapping[str, str] = field(default_factory=dict)  # on the PodMonitor, for Prometheus's selector
    interval: str = "30s"
    scrape_timeout: str = "10s"


@dataclass(frozen=True)
class RolloutSpec:
    """How a rolling restart gives up: a new pod the scheduler cannot place for this long stops it."""

    unschedulable_timeout: str = "5m"


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    namespace: str
    uid: str
    generation: int
    replicas: int = 3  # every node; 0 hibernates the cluster
    voting_replicas: int | None = None  # None: every node votes; else the first ones, the others never vote
    image: str = DEFAULT_IMAGE
    image_pull_policy: str = "IfNotPresent"
    settings: Mapping[str, str] = field(default_factory=dict)
    template: Mapping[str, Any] = field(default_factory=dict)
    resources: Mapping[str, Any] = field(default_factory=dict)
    storage: StorageSpec = StorageSpec()
    disruption_budget: DisruptionBudgetSpec = DisruptionBudgetSpec()
    audit: AuditSpec = AuditSpec()
    tls: TlsSpec = TlsSpec()
    auth_enabled: bool = True
    network_policy_enabled: bool = True
    client_access: tuple[Mapping[str, Any], ...] | None = None  # None: the default peers (docs/operator.md)
    metrics_access: tuple[Mapping[str, Any], ...] = ()  # also admitted to the client port: who scrapes /metrics
    scheduling: SchedulingSpec = SchedulingSpec()
    rollout: RolloutSpec = RolloutSpec()
    monitoring: MonitoringSpec = MonitoringSpec()
    snapshots: SnapshotsSpec | None = None
    restore_from: str | None = None  # a snapshot in the snapshot repository, restored once after the cluster forms
    archive: BucketSpec | None = None
    creation_timestamp: str | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)
    access: AccessSpec = field(
        default_factory=AccessSpec
    )  # spec.access: ServiceAccount tokens, roles, role mappings, quotas

    @property
    def cluster_name(self) -> str:
        return self.settings.get("cluster.name") or self.name

    @property
    def snapshot_volume(self) -> bool:
        """Snapshots go to a volume mounted in every pod (not to object storage)."""
        return self.snapshots is not None and self.snapshots.s3 is None

    @property
    def hibernating(self) -> bool:
        return self.replicas == 0

    @property
    def voters(self) -> int:
        """Voting (master-eligible) nodes asked for; 0 while hibernating."""
        if self.hibernating:
            return 0
        return self.replicas if self.voting_replicas is None else min(self.voting_replicas, self.replicas)

    @property
    def non_voters(self) -> int:
        """Nodes that never vote: those of `replicas` beyond `votingReplicas`."""
        return self.replicas - self.voters

    @property
    def hibernated_voters(self) -> int | None:
        value = self.annotations.get(HIBERNATED_VOTERS_ANNOTATION, "")
        return int(value) if value.isdigit() else None

    @property
    def paused(self) -> bool:
        return self.annotations.get(PAUSE_ANNOTATION, "").lower() == "true"

    @property
    def pinned_initial_master_nodes(self) -> tuple[str, ...]:
        value = self.annotations.get(INITIAL_MASTER_NODES_ANNOTATION, "")
        return tuple(name for name in value.split(",") if name)

    @property
    def adopted_claims(self) -> tuple[str, ...]:
        value = self.annotations.get(ADOPTED_CLAIMS_ANNOTATION, "")
        return tuple(name for name in value.split(",") if name)

    @property
    def recorded_cluster_uuid(self) -> str | None:
        return self.annotations.get(CLUSTER_UUID_ANNOTATION) or None

    @classmethod
    def from_resource(cls, body: Mapping[str, Any]) -> ClusterSpec:
        metadata = body.get("metadata") or {}
        spec = body.get("spec") or {}
        storage = spec.get("storage") or {}
        retention = storage.get("persistentVolumeClaimRetentionPolicy") or {}
        pdb = spec.get("podDisruptionBudget") or {}
        audit = spec.get("audit") or {}
        spark = audit.get("spark") or {}
        tls = spec.get("tls") or {}
        issuer = tls.get("issuerRef") or None
        access = spec.get("clientAccess")
        snapshots = spec.get("snapshots")
        volume = (snapshots or {}).get("volume") or {}
        snapshots_s3 = (snapshots or {}).get("s3")
        archive = spec.get("archive")
        scheduling = spec.get("scheduling") or {}
        spread = scheduling.get("topologySpreadConstraints")
        pod_monitor = (spec.get("monitoring") or {}).get("podMonitor") or {}
        return cls(
            name=metadata["name"],
            namespace=metadata.get("namespace") or "default",
            uid=metadata.get("uid", ""),
            generation=int(metadata.get("generation") or 0),
            replicas=int(spec.get("replicas", 3)),
            voting_replicas=None if spec.get("votingReplicas") is None else int(spec["votingReplicas"]),
            image=spec.get("image") or DEFAULT_IMAGE,
            image_pull_policy=spec.get("imagePullPolicy") or "IfNotPresent",
            settings={str(key): str(value) for key, value in (spec.get("settings") or {}).items()},
            template=spec.get("template") or {},
            resources=spec.get("resources") or {},
            storage=StorageSpec(
                size=str(storage.get("size") or "1Gi"),
                storage_class_name=storage.get("storageClassName"),
                when_deleted=retention.get("whenDeleted", "Retain"),
                when_scaled=retention.get("whenScaled", "Delete"),
            ),
            disruption_budget=DisruptionBudgetSpec(
                mode=pdb.get("mode", "Managed"),
                min_available=(pdb.get("custom") or {}).get("minAvailable"),
                max_unavailable=(pdb.get("custom") or {}).get("maxUnavailable"),
            ),
            audit=AuditSpec(
                enabled=bool(audit.get("enabled", False)),
                schedule=audit.get("schedule", "0 3 * * *"),
                spark_master=spark.get("master", "local[*]"),
                spark_conf={str(k): str(v) for k, v in (spark.get("conf") or {}).items()},
                resources=spark.get("resources") or {},
                report_volume_claim=audit.get("reportVolumeClaimName"),
            ),
            tls=TlsSpec(
                enabled=bool(tls.get("enabled", True)),
                issuer_ref=(
                    IssuerRef(
                        name=str(issuer["name"]),
                        kind=str(issuer.get("kind") or "Issuer"),
                        group=str(issuer.get("group") or "cert-manager.io"),
                    )
                    if issuer and issuer.get("name")
                    else None
                ),
                certificate_lifetime=str(tls.get("certificateLifetime") or "2160h"),
                renewal_fraction=float(tls.get("renewalFraction", 0.67)),
                ca_lifetime=str(tls.get("caLifetime") or "87600h"),
                client_authentication=str(tls.get("clientAuthentication") or "none"),
            ),
            auth_enabled=bool((spec.get("auth") or {}).get("enabled", True)),
            network_policy_enabled=bool((spec.get("networkPolicy") or {}).get("enabled", True)),
            client_access=None if access is None else tuple(dict(peer) for peer in access),
            metrics_access=tuple(dict(peer) for peer in spec.get("metricsAccess") or ()),
            scheduling=SchedulingSpec(
                node_selector={str(k): str(v) for k, v in (scheduling.get("nodeSelector") or {}).items()},
                tolerations=tuple(dict(t) for t in scheduling.get("tolerations") or ()),
                affinity=dict(scheduling.get("affinity") or {}),
                topology_spread_constraints=None if spread is None else tuple(dict(c) for c in spread),
                priority_class_name=scheduling.get("priorityClassName") or None,
            ),
            rollout=RolloutSpec(
                unschedulable_timeout=str((spec.get("rollout") or {}).get("unschedulableTimeout") or "5m"),
            ),
            monitoring=MonitoringSpec(
                pod_monitor=None if pod_monitor.get("enabled") is None else bool(pod_monitor["enabled"]),
                labels={str(k): str(v) for k, v in (pod_monitor.get("labels") or {}).items()},
                interval=str(pod_monitor.get("interval") or "30s"),
                scrape_timeout=str(pod_monitor.get("scrapeTimeout") or "10s"),
            ),
            snapshots=(
                None
                if snapshots is None
                else SnapshotsSpec(
                    schedule=snapshots.get("schedule") or None,
                    retention=int(snapshots.get("retention", 7)),
                    claim_name=volume.get("claimName") or None,
                    size=str(volume.get("size") or "1Gi"),
                    storage_class_name=volume.get("storageClassName") or None,
                    access_mode=str(volume.get("accessMode") or "ReadWriteOnce"),
                    s3=BucketSpec.from_resource(snapshots_s3) if snapshots_s3 else None,
                )
            ),
            archive=BucketSpec.from_resource(archive) if archive else None,
            restore_from=(spec.get("restoreFrom") or {}).get("snapshot") or None,
            creation_timestamp=metadata.get("creationTimestamp"),
            annotations=dict(metadata.get("annotations") or {}),
            access=AccessSpec.from_resource(spec.get("access")),
        )
