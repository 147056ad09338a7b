"""spec.archive and spec.snapshots.s3: what the pods and the audit job need to use object storage.

The connection (endpoint, region, addressing, credentials) becomes the sidecars' `s3.client.default` settings;
the credentials never become settings, nor go into any ConfigMap: a Secret's AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN, if it has one) are put in the containers' environment by
reference, or the pods run as a service account that a cloud's workload identity maps to a role (the AWS SDKs
read the web-identity token it injects). One connection per cluster: spec.snapshots.s3 takes spec.archive's and
may only repeat it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from coordinated.coordination.object_names import parse_base_path, parse_bucket
from coordinated.operator.spec import ClusterSpec, S3Connection
from coordinated.s3.s3_settings import DEFAULT_CLIENT, S3_ENDPOINT, S3_PATH_STYLE_ACCESS, S3_REGION
from coordinated.sidecar.events.archive_settings import ARCHIVE_BASE_PATH, ARCHIVE_BUCKET, ARCHIVE_CLIENT, ARCHIVE_TYPE

CLIENT = DEFAULT_CLIENT  # the sidecars' s3.client.NAME the operator writes
CREDENTIAL_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
SNAPSHOT_REPOSITORY_BASE = "snapshots"  # the default base path of s3 snapshots, beside the archive's prefixes
AUDIT_CHECKPOINTS = "_audit"  # under the archive's base path: the incremental audit's checkpoint per cluster


def connection(spec: ClusterSpec) -> S3Connection | None:
    """The cluster's S3 connection: spec.archive's, completed by what spec.snapshots.s3 adds."""
    archive = spec.archive.connection if spec.archive is not None else None
    snapshots = spec.snapshots.s3.connection if spec.snapshots is not None and spec.snapshots.s3 is not None else None
    if archive is None or snapshots is None:
        return archive or snapshots
    return replace(
        archive,
        endpoint=archive.endpoint or snapshots.endpoint,
        region=archive.region or snapshots.region,
        path_style_access=archive.path_style_access
        if archive.path_style_access is not None
        else snapshots.path_style_access,
        credentials_secret=archive.credentials_secret or snapshots.credentials_secret,
        service_account_name=archive.service_account_name or snapshots.service_account_name,
    )


def validate(spec: ClusterSpec) -> list[str]:
    """What the CRD's schema cannot check: names S3 refuses, and two connections that disagree."""
    problems: list[str] = []
    targets = [("archive", spec.archive)] + (
        [("snapshots.s3", spec.snapshots.s3)] if spec.snapshots is not None and spec.snapshots.s3 is not None else []
    )
    for where, target in targets:
        if target is None:
            continue
        for field, value, parse in (
            ("bucket", target.bucket, parse_bucket),
            ("basePath", target.base_path, parse_base_path),
        ):
            try:
                parse(value)
            except ValueError as error:
                problems.append(f"{where}.{field}: {error}")
    if len(targets) == 2 and spec.archive is not None and spec.snapshots is not None and spec.snapshots.s3 is not None:
        mine, theirs = spec.archive.connection, spec.snapshots.s3.connection
        for field in ("endpoint", "region", "path_style_access", "credentials_secret", "service_account_name"):
            a, b = getattr(mine, field), getattr(theirs, field)
            if a is not None and b is not None and a != b:
                problems.append(
                    f"snapshots.s3 and archive name different {field.replace('_', ' ')}s ({b} and {a}): a cluster "
                    "has one object storage connection; set it in archive only"
                )
    both = connection(spec)
    if both is not None and both.credentials_secret and both.service_account_name:
        problems.append("credentials: give secretName or serviceAccountName, not both")
    return problems


def client_settings(spec: ClusterSpec) -> dict[str, str]:
    """The sidecars' s3.client.default and history.archive.* settings."""
    conn = connection(spec)
    if conn is None:
        return {}
    settings = {
        S3_REGION.concrete(CLIENT): conn.region or S3_REGION.required_default(),
        S3_PATH_STYLE_ACCESS.concrete(CLIENT): str(conn.path_style).lower(),
    }
    if conn.endpoint:
        settings[S3_ENDPOINT.concrete(CLIENT)] = conn.endpoint
    if spec.archive is not None:
        settings.update(
            {
                ARCHIVE_TYPE.name: "s3",
                ARCHIVE_BUCKET.name: spec.archive.bucket,
                ARCHIVE_BASE_PATH.name: spec.archive.base_path,
                ARCHIVE_CLIENT.name: CLIENT,
            }
        )
    return settings


def credential_env(spec: ClusterSpec) -> list[dict[str, Any]]:
    """The credentials Secret's keys as environment variables, by reference (never their values)."""
    conn = connection(spec)
    if conn is None or not conn.credentials_secret:
        return []
    return [
        {
            "name": key,
            "valueFrom": {
                "secretKeyRef": {"name": conn.credentials_secret, "key": key, "optional": key == "AWS_SESSION_TOKEN"}
            },
        }
        for key in CREDENTIAL_KEYS
    ]


def service_account(spec: ClusterSpec) -> str | None:
    """The service account the pods must run as for a workload identity, if the spec names one."""
    conn = connection(spec)
    return conn.service_account_name if conn is not None else None


def snapshot_repository_body(spec: ClusterSpec, volume_location: str) -> dict[str, Any]:
    """What the operator registers as the cluster's snapshot repository: the volume's directory, or the bucket."""
    if spec.snapshots is None or spec.snapshots.s3 is None:
        return {"type": "fs", "settings": {"location": volume_location}}
    target = spec.snapshots.s3
    base_path = target.base_path or SNAPSHOT_REPOSITORY_BASE
    return {"type": "s3", "settings": {"bucket": target.bucket, "base_path": base_path, "client": CLIENT}}


def audit_source(spec: ClusterSpec) -> tuple[str, str] | None:
    """(the archive to audit, the checkpoint object kept beside it) for the audit CronJob, or None."""
    if spec.archive is None:
        return None
    root = f"s3://{spec.archive.bucket}/{spec.archive.base_path}".rstrip("/")
    source = f"{root}/{spec.recorded_cluster_uuid}" if spec.recorded_cluster_uuid else root
    return source, f"{root}/{AUDIT_CHECKPOINTS}/{spec.namespace}/{spec.name}/checkpoint.json"


def audit_args(spec: ClusterSpec) -> list[str]:
    """The audit's options for the cluster's object storage (never a credential)."""
    conn = connection(spec)
    if conn is None:
        return []
    args = ["--s3-region", conn.region or "us-east-1", "--s3-path-style-access", str(conn.path_style).lower()]
    if conn.endpoint:
        endpoint = conn.endpoint if "://" in conn.endpoint else f"https://{conn.endpoint}"
        args += ["--s3-endpoint", endpoint]
    return args
