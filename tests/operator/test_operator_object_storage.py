"""spec.archive and spec.snapshots.s3 rendered into the pods and the audit CronJob: settings the sidecar accepts,
credentials only by reference (never in args, settings or ConfigMaps), the service account for a workload
identity, snapshots in a bucket without a volume, and the incremental audit of the archive."""

from __future__ import annotations

import json
from typing import Any

from coordinated.operator import manifests, object_storage
from coordinated.operator.spec import CLUSTER_UUID_ANNOTATION, ClusterSpec
from coordinated.sidecar.events.archive_settings import ArchiveSettings
from coordinated.sidecar.node_settings import sidecar_registry

ARCHIVE = {
    "bucket": "histories",
    "basePath": "/prod/",
    "endpoint": "http://10.0.0.5:7070",
    "credentials": {"secretName": "s3-keys"},
}


def spec_of(**spec: Any) -> ClusterSpec:
    return ClusterSpec.from_resource(
        {
            "apiVersion": "coordinated.dev/v1alpha1",
            "kind": "CoordinatedCluster",
            "metadata": {
                "name": "demo",
                "namespace": "prod",
                "uid": "uid-1",
                "generation": 1,
                "annotations": {CLUSTER_UUID_ANNOTATION: "c0ffee"},
            },
            "spec": {"tls": {"enabled": False}, **spec},
        }
    )


def children(spec: ClusterSpec) -> dict[str, dict[str, Any]]:
    built = manifests.desired_children(
        spec, replicas=3, initial_master_nodes=("demo-0", "demo-1", "demo-2"), health="green", voters=3
    )
    return {child["kind"]: child for child in built}


def sidecar_settings(statefulset: dict[str, Any]) -> dict[str, str]:
    (container, *_) = statefulset["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    return dict(args[i + 1].split("=", 1) for i, arg in enumerate(args) if arg == "-E")


def test_the_archive_becomes_sidecar_settings_the_sidecar_accepts() -> None:
    statefulset = children(spec_of(archive=ARCHIVE))["StatefulSet"]
    settings = sidecar_settings(statefulset)
    assert {k: v for k, v in settings.items() if k.startswith(("history.archive.", "s3.client."))} == {
        "history.archive.type": "s3",
        "history.archive.s3.bucket": "histories",
        "history.archive.s3.base_path": "prod",
        "history.archive.s3.client": "default",
        "s3.client.default.endpoint": "http://10.0.0.5:7070",
        "s3.client.default.region": "us-east-1",
        "s3.client.default.path_style_access": "true",
    }
    ours = {k: v for k, v in settings.items() if k.startswith(("history.archive.", "s3.client."))}
    parsed = sidecar_registry().parse({"node.name": "demo-0", **ours})  # what the sidecar does at startup
    archive = ArchiveSettings.from_settings(parsed)
    assert archive is not None and archive.bucket == "histories"
    assert archive.client.endpoint_url == "http://10.0.0.5:7070" and archive.client.path_style_access


def test_credentials_are_referenced_never_written() -> None:
    built = children(spec_of(archive=ARCHIVE, audit={"enabled": True}))
    (container, *_) = built["StatefulSet"]["spec"]["template"]["spec"]["containers"]
    references = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if e["name"].startswith("AWS_")}
    assert references == {
        "AWS_ACCESS_KEY_ID": {"name": "s3-keys", "key": "AWS_ACCESS_KEY_ID", "optional": False},
        "AWS_SECRET_ACCESS_KEY": {"name": "s3-keys", "key": "AWS_SECRET_ACCESS_KEY", "optional": False},
        "AWS_SESSION_TOKEN": {"name": "s3-keys", "key": "AWS_SESSION_TOKEN", "optional": True},
    }
    assert "credentials_file" not in json.dumps(container["args"])
    assert "s3-keys" not in json.dumps(built["ConfigMap"]), "the bootstrap ConfigMap holds no credentials"
    (audit,) = built["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert {e["name"] for e in audit["env"]} >= {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}


def test_a_service_account_carries_a_workload_identity() -> None:
    archive = {**ARCHIVE, "credentials": {"serviceAccountName": "history-writer"}}
    built = children(spec_of(archive=archive, audit={"enabled": True}))
    pod = built["StatefulSet"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "history-writer"
    assert not [e for e in pod["containers"][0]["env"] if e["name"].startswith("AWS_")]
    cronjob_pod = built["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert cronjob_pod["serviceAccountName"] == "history-writer"


def test_snapshots_in_a_bucket_need_no_volume() -> None:
    spec = spec_of(archive=ARCHIVE, snapshots={"schedule": "@daily", "s3": {"bucket": "backups"}})
    assert manifests.snapshot_claim(spec) is None and manifests.snapshot_claim_name(spec) is None
    statefulset = children(spec)["StatefulSet"]
    pod = statefulset["spec"]["template"]["spec"]
    assert "path.repo" not in sidecar_settings(statefulset)
    assert all(v["name"] != manifests.SNAPSHOT_VOLUME for v in pod["volumes"])
    assert object_storage.snapshot_repository_body(spec, manifests.SNAPSHOT_DIR) == {
        "type": "s3",
        "settings": {"bucket": "backups", "base_path": "snapshots", "client": "default"},
    }
    volume = spec_of(snapshots={"schedule": "@daily"})
    assert object_storage.snapshot_repository_body(volume, manifests.SNAPSHOT_DIR) == {
        "type": "fs",
        "settings": {"location": manifests.SNAPSHOT_DIR},
    }


def test_snapshots_alone_bring_their_own_connection() -> None:
    spec = spec_of(snapshots={"s3": {"bucket": "backups", "endpoint": "https://s3.example.com", "region": "eu-west-3"}})
    settings = sidecar_settings(children(spec)["StatefulSet"])
    assert settings["s3.client.default.endpoint"] == "https://s3.example.com"
    assert settings["s3.client.default.region"] == "eu-west-3"
    assert "history.archive.type" not in settings


def test_the_audit_cronjob_audits_the_archive_incrementally() -> None:
    cronjob = children(spec_of(archive=ARCHIVE, audit={"enabled": True}))["CronJob"]
    (container,) = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[:4] == [
        "audit",
        "s3://histories/prod/c0ffee",
        "--checkpoint",
        "s3://histories/prod/_audit/prod/demo/checkpoint.json",
    ]
    assert "--from-cluster" not in args
    assert args[args.index("--s3-endpoint") + 1] == "http://10.0.0.5:7070"
    assert args[args.index("--s3-path-style-access") + 1] == "true"
    assert "COORDINATED_TOKEN" not in json.dumps(container.get("env")), "no sidecar is asked"


def test_conflicting_or_invalid_object_storage_is_refused_by_name() -> None:
    conflicting = spec_of(
        archive=ARCHIVE, snapshots={"s3": {"bucket": "backups", "endpoint": "https://elsewhere.example.com"}}
    )
    (problem,) = object_storage.validate(conflicting)
    assert "snapshots.s3 and archive name different endpoints" in problem
    agreeing = spec_of(archive=ARCHIVE, snapshots={"s3": {"bucket": "backups", "endpoint": ARCHIVE["endpoint"]}})
    assert object_storage.validate(agreeing) == []
    bad = spec_of(archive={**ARCHIVE, "bucket": "Not_A_Bucket", "basePath": "a/../b"})
    problems = object_storage.validate(bad)
    assert any(p.startswith("archive.bucket:") for p in problems) and any(
        p.startswith("archive.basePath:") for p in problems
    )
