"""The few Kubernetes API calls the operator makes, through the official client in worker threads.

Children are written with server-side apply under one field manager, so re-applying the same manifest is
a no-op and fields that other controllers own (for example a StatefulSet's status) are left alone.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import socket
import threading
from collections.abc import Mapping
from typing import Any, cast

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from coordinated.operator import API_VERSION, GROUP, KIND, PLURAL, VERSION
from coordinated.operator.manifests import DATA_VOLUME, SIDECAR_CONTAINER
from coordinated.operator.observation import ClaimObservation, PodObservation, StatefulSetObservation
from coordinated.operator.placement import VOTING_LABEL, ZONE_LABEL

FIELD_MANAGER = "coordinated-operator"


def load_kube_config() -> None:
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]


class Kube:
    def __init__(self) -> None:
        self._api_client = client.ApiClient()
        self._dynamic: DynamicClient | None = None
        self._discovery = threading.Lock()
        self._core = client.CoreV1Api(self._api_client)
        self._apps = client.AppsV1Api(self._api_client)
        self._custom = client.CustomObjectsApi(self._api_client)
        self._storage = client.StorageV1Api(self._api_client)
        self._scheduling = client.SchedulingV1Api(self._api_client)

    def _resource(self, api_version: str, kind: str) -> Any:
        # The calls run in worker threads, several passes at once, and the dynamic client's discovery (a lazy
        # cache of the API groups) is not thread-safe: concurrent lookups failed with KeyError('resources').
        with self._discovery:
            if self._dynamic is None:  # discovery happens once, lazily, on first use
                self._dynamic = DynamicClient(self._api_client)  # type: ignore[no-untyped-call]
            return self._dynamic.resources.get(api_version=api_version, kind=kind)

    def _apply(self, manifest: Mapping[str, Any]) -> None:
        resource = self._resource(manifest["apiVersion"], manifest["kind"])
        metadata = manifest["metadata"]
        resource.server_side_apply(
            body=dict(manifest),
            name=metadata["name"],
            namespace=metadata.get("namespace"),
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
        )

    async def apply(self, manifest: Mapping[str, Any]) -> None:
        await asyncio.to_thread(self._apply, manifest)

    def _create_if_absent(self, manifest: Mapping[str, Any]) -> bool:
        resource = self._resource(manifest["apiVersion"], manifest["kind"])
        try:
            resource.create(body=dict(manifest), namespace=manifest["metadata"].get("namespace"))
            return True
        except ApiException as error:
            if error.status == 409:
                return False
            raise

    async def create_if_absent(self, manifest: Mapping[str, Any]) -> bool:
        return await asyncio.to_thread(self._create_if_absent, manifest)

    def _delete_if_present(self, api_version: str, kind: str, name: str, namespace: str) -> bool:
        try:
            self._resource(api_version, kind).delete(name=name, namespace=namespace)
            return True
        except ApiException as error:
            if error.status == 404:
                return False
            raise

    async def delete_if_present(self, api_version: str, kind: str, name: str, namespace: str) -> bool:
        return await asyncio.to_thread(self._delete_if_present, api_version, kind, name, namespace)

    def _secret_data(self, name: str, namespace: str) -> dict[str, str] | None:
        try:
            secret = self._core.read_namespaced_secret(name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return {str(key): str(value) for key, value in (secret.data or {}).items()}

    async def secret_data(self, name: str, namespace: str) -> dict[str, str] | None:
        """A Secret's data (base64 values, as stored), or None when it does not exist."""
        return await asyncio.to_thread(self._secret_data, name, namespace)

    def _serves(self, api_version: str, kind: str) -> bool:
        try:
            self._resource(api_version, kind)
            return True
        except ResourceNotFoundError:
            return False

    async def serves(self, api_version: str, kind: str) -> bool:
        """Whether the API server knows this kind (for example cert-manager's Certificate), by discovery."""
        return await asyncio.to_thread(self._serves, api_version, kind)

    def _statefulset(self, name: str, namespace: str) -> StatefulSetObservation | None:
        try:
            sts = self._apps.read_namespaced_stateful_set(name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        template = sts.spec.template.spec if sts.spec.template else None
        claims = {claim.metadata.name: claim for claim in sts.spec.volume_claim_templates or () if claim.metadata}
        data = claims.get(DATA_VOLUME)
        requests = (data.spec.resources.requests or {}) if data and data.spec and data.spec.resources else {}
        policy = sts.spec.persistent_volume_claim_retention_policy
        return StatefulSetObservation(
            replicas=int(sts.spec.replicas or 0),
            update_revision=str(sts.status.update_revision) if sts.status and sts.status.update_revision else None,
            volumes=frozenset(volume.name for volume in (template.volumes or ())) if template else frozenset(),
            claim_size=str(requests["storage"]) if "storage" in requests else None,
            when_scaled=policy.when_scaled if policy else None,
            deleting=sts.metadata is not None and sts.metadata.deletion_timestamp is not None,
        )

    async def statefulset(self, name: str, namespace: str) -> StatefulSetObservation | None:
        """The StatefulSet as stored (None when it does not exist): its size, template revision and claims."""
        return await asyncio.to_thread(self._statefulset, name, namespace)

    def _delete_pod(self, name: str, namespace: str) -> None:
        try:
            self._core.delete_namespaced_pod(name, namespace)
        except ApiException as error:
            if error.status != 404:
                raise

    async def delete_pod(self, name: str, namespace: str) -> None:
        """Graceful deletion (the pod's termination grace period); the StatefulSet recreates the pod."""
        await asyncio.to_thread(self._delete_pod, name, namespace)

    def _pods(self, namespace: str, selector: str) -> dict[str, PodObservation]:
        pods = self._core.list_namespaced_pod(namespace, label_selector=selector).items
        observed: dict[str, PodObservation] = {}
        for pod in pods:
            if pod.metadata is None or not pod.metadata.name:
                continue
            conditions = (pod.status.conditions or []) if pod.status else []
            ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
            unscheduled = next(
                (
                    c
                    for c in conditions
                    if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
                ),
                None,
            )
            unscheduled_since = unscheduled.last_transition_time if unscheduled is not None else None
            labels = pod.metadata.labels or {}
            containers = pod.spec.containers if pod.spec else []
            sidecar = next((c for c in containers if c.name == SIDECAR_CONTAINER), None)
            observed[pod.metadata.name] = PodObservation(
                name=pod.metadata.name,
                ready=ready,
                terminating=pod.metadata.deletion_timestamp is not None,
                ip=pod.status.pod_ip if pod.status else None,
                revision=labels.get("controller-revision-hash"),
                voting=labels.get(VOTING_LABEL) != "false",
                image=sidecar.image if sidecar else None,
                node_name=pod.spec.node_name if pod.spec else None,
                unschedulable=(unscheduled.message or "no reason given") if unscheduled else None,
                unschedulable_for=_seconds_since(unscheduled_since) if unscheduled_since is not None else 0.0,
                phase=pod.status.phase if pod.status else None,
            )
        return observed

    async def pods(self, namespace: str, selector: str) -> dict[str, PodObservation]:
        return await asyncio.to_thread(self._pods, namespace, selector)

    def _cluster(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found = self._custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
            return cast(dict[str, Any], found)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    async def cluster(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The CoordinatedCluster as stored now (Kopf's body may predate our own last patch)."""
        return await asyncio.to_thread(self._cluster, namespace, name)

    def _patch_annotations(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        self._custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            {"metadata": {"annotations": dict(annotations)}},
            _content_type="application/merge-patch+json",
        )

    async def patch_annotations(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        """Written at once, not with Kopf's deferred patch, so the very next pass already sees them."""
        await asyncio.to_thread(self._patch_annotations, namespace, name, annotations)

    def _patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        self._custom.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            {"status": dict(status)},
            _content_type="application/merge-patch+json",
        )

    async def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        await asyncio.to_thread(self._patch_status, namespace, name, status)

    def _claims(self, namespace: str, selector: str) -> list[ClaimObservation]:
        claims = self._core.list_namespaced_persistent_volume_claim(namespace, label_selector=selector).items
        return sorted(
            (_claim_observation(claim) for claim in claims if claim.metadata and claim.metadata.name),
            key=lambda claim: claim.name,
        )

    async def claims(self, namespace: str, selector: str) -> list[ClaimObservation]:
        """The PersistentVolumeClaims with these labels (a StatefulSet's claims carry its selector)."""
        return await asyncio.to_thread(self._claims, namespace, selector)

    def _zones(self, nodes: frozenset[str]) -> dict[str, str | None]:
        zones: dict[str, str | None] = {}
        for name in sorted(nodes):
            try:
                node = self._core.read_node(name)
            except ApiException as error:
                if error.status in (403, 404):
                    zones[name] = None
                    continue
                raise
            zones[name] = ((node.metadata.labels or {}) if node.metadata else {}).get(ZONE_LABEL)
        return zones

    async def zones(self, nodes: frozenset[str]) -> dict[str, str | None]:
        """Each Kubernetes node's topology.kubernetes.io/zone label (None: none, or the node is unknown)."""
        return await asyncio.to_thread(self._zones, nodes)

    def _priority_class(self, name: str) -> tuple[int, str] | None:
        try:
            found = self._scheduling.read_priority_class(name)
        except ApiException as error:
            if error.status in (403, 404):
                return None
            raise
        return int(found.value or 0), str(found.preemption_policy or "PreemptLowerPriority")

    async def priority_class(self, name: str) -> tuple[int, str] | None:
        """A PriorityClass's value and preemption policy (None: not found, or not readable)."""
        return await asyncio.to_thread(self._priority_class, name)

    def _revision_template(self, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            response: Any = self._apps.read_namespaced_controller_revision(name, namespace, _preload_content=False)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        data = json.loads(response.data).get("data") or {}
        template = dict((data.get("spec") or {}).get("template") or {})
        template.pop("$patch", None)  # the revision stores the template as a replacing patch
        return template or None

    async def revision_template(self, name: str, namespace: str) -> dict[str, Any] | None:
        """The pod template a StatefulSet's ControllerRevision holds (None: no such revision)."""
        return await asyncio.to_thread(self._revision_template, name, namespace)

    def _storage_class_expandable(self, name: str) -> bool | None:
        try:
            storage_class = self._storage.read_storage_class(name)
        except ApiException as error:
            if error.status in (403, 404):
                return None
            raise
        return bool(storage_class.allow_volume_expansion)

    async def storage_class_expandable(self, name: str) -> bool | None:
        """Whether a StorageClass has allowVolumeExpansion: true (None: not found, or not readable)."""
        return await asyncio.to_thread(self._storage_class_expandable, name)

    def _resize_claim(self, name: str, namespace: str, size: str) -> None:
        body = {"spec": {"resources": {"requests": {"storage": size}}}}
        self._core.patch_namespaced_persistent_volume_claim(name, namespace, body)

    async def resize_claim(self, name: str, namespace: str, size: str) -> None:
        """Asks for a larger volume; the storage system grows it (the API server refuses where it cannot)."""
        await asyncio.to_thread(self._resize_claim, name, namespace, size)

    def _orphan_statefulset(self, name: str, namespace: str) -> None:
        try:
            self._apps.delete_namespaced_stateful_set(
                name, namespace, body=client.V1DeleteOptions(propagation_policy="Orphan")
            )
        except ApiException as error:
            if error.status != 404:
                raise

    async def orphan_statefulset(self, name: str, namespace: str) -> None:
        """Deletes a StatefulSet but not its pods and claims, so that it can be created again with another
        claim template (which cannot be changed in place); the new one adopts the pods."""
        await asyncio.to_thread(self._orphan_statefulset, name, namespace)

    def _service_account_issuer(self) -> tuple[bytes, bytes]:
        # Raw bodies: the keys are served as application/jwk-set+json, which the generated models do not parse.
        well_known = client.WellKnownApi(self._api_client)
        openid = client.OpenidApi(self._api_client)
        discovery: Any = well_known.get_service_account_issuer_open_id_configuration(_preload_content=False)
        keys: Any = openid.get_service_account_issuer_open_id_keyset(_preload_content=False)
        return bytes(discovery.data), bytes(keys.data)

    async def service_account_issuer(self) -> tuple[bytes, bytes]:
        """The API server's OIDC discovery document (`/.well-known/openid-configuration`) and its service-account
        signing keys (`/openid/v1/jwks`), as served."""
        return await asyncio.to_thread(self._service_account_issuer)

    def _post_event(self, body: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        metadata = body["metadata"]
        namespace = metadata.get("namespace") or "default"
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event: Any = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{metadata['name']}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "name": metadata["name"],
                "namespace": namespace,
                "uid": metadata.get("uid"),
            },
            "type": event_type,
            "reason": reason,
            "message": message,
            "source": {"component": FIELD_MANAGER},
            "reportingComponent": FIELD_MANAGER,
            "reportingInstance": socket.gethostname(),
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self._core.create_namespaced_event(namespace, event)

    async def post_event(self, body: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        await asyncio.to_thread(self._post_event, body, event_type, reason, message)


RESIZE_FAILURES = ("ControllerResizeError", "NodeResizeError")  # claim conditions (Kubernetes 1.31+)


def _seconds_since(moment: datetime.datetime) -> float:
    return max(0.0, (datetime.datetime.now(datetime.UTC) - moment).total_seconds())


def _claim_observation(claim: Any) -> ClaimObservation:
    spec, status = claim.spec, claim.status
    requests = (spec.resources.requests or {}) if spec and spec.resources else {}
    capacity = (status.capacity or {}) if status else {}
    problems = [
        f"{condition.type}: {condition.message}"
        for condition in (status.conditions or () if status else ())
        if condition.type in RESIZE_FAILURES
    ]
    allocated = (status.allocated_resource_statuses or {}) if status else {}
    if str(allocated.get("storage", "")).endswith("Infeasible"):
        problems.append(f"the storage system refuses the size ({allocated['storage']})")
    return ClaimObservation(
        name=claim.metadata.name,
        requested=str(requests["storage"]) if "storage" in requests else None,
        capacity=str(capacity["storage"]) if "storage" in capacity else None,
        storage_class=spec.storage_class_name if spec else None,
        problem="; ".join(problems) or None,
    )
