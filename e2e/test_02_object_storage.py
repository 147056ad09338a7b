"""Object storage on the real cluster, against the S3-compatible server that `make e2e-up` runs beside it
(versitygw on the bridge address; e2e/lib/common.sh):

- a 3-node cluster with spec.archive and spec.snapshots.s3 takes writes and a snapshot into the bucket; it is
  deleted (each pod archives its last segment on the way out), and its archive is audited from s3a:// by
  spark-submit in cluster mode on 2 executors;
- a new cluster is created with spec.restoreFrom over that bucket and gets every key back, with its versions;
- a node with a small retention under steady writes keeps its disk bounded while its archive keeps what
  retention deleted.

The credentials reach the pods only as a Secret that the test creates from the harness's key; on a cluster
without the harness's object store (kind), these tests skip, saying so.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from coordinated.sidecar.events.history_segments import expanded_lines
from e2e.support import (
    REPO,
    Cluster,
    apply,
    cluster_manifest,
    every_key,
    kubectl,
    remove_cluster,
    run_spark_submit_audit,
    wait_ready,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]

SOURCE, TARGET = "archived", "fromarchive"
SECRET = "e2e-s3-credentials"
HISTORIES, SNAPSHOTS = "histories", "snapshots"
KEYS = 40
Figure = Callable[[str], None]


@dataclass(frozen=True)
class ObjectStore:
    endpoint: str
    data: Path  # the server's folder: one subfolder per bucket

    def objects(self, bucket: str, prefix: str = "") -> list[Path]:
        root = self.data / bucket / prefix
        return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


@pytest.fixture(scope="module")
def object_store(namespace: str) -> Iterator[ObjectStore]:
    """The harness's object store, its buckets, and the credentials Secret in the test namespace."""
    state = Path(os.environ.get("E2E_STATE") or REPO / "e2e" / ".state") / "s3"
    if not (state / "endpoint").is_file():
        pytest.skip("no object store beside this cluster (make e2e-up runs one; e2e/kind.sh does not)")
    store = ObjectStore((state / "endpoint").read_text().strip(), state / "data")
    for bucket in (HISTORIES, SNAPSHOTS):
        (store.data / bucket).mkdir(parents=True, exist_ok=True)  # a bucket is a folder of the posix backend
    kubectl("-n", namespace, "delete", "secret", SECRET, "--ignore-not-found")
    kubectl("-n", namespace, "create", "secret", "generic", SECRET, f"--from-env-file={state / 'env'}")
    yield store
    kubectl("-n", namespace, "delete", "secret", SECRET, "--ignore-not-found")


def with_object_storage(manifest: dict[str, Any], store: ObjectStore, **extra: Any) -> dict[str, Any]:
    manifest["spec"]["archive"] = {
        "bucket": HISTORIES,
        "basePath": "e2e",
        "endpoint": store.endpoint,
        "credentials": {"secretName": SECRET},
    }
    manifest["spec"]["snapshots"] = {"schedule": "0 3 * * *", "retention": 2, "s3": {"bucket": SNAPSHOTS}}
    manifest["spec"].update(extra)
    return manifest


def test_archive_audit_from_s3a_on_two_executors_then_restore_from_the_bucket(
    operator_release: str, namespace: str, object_store: ObjectStore, figure: Figure
) -> None:
    started = time.monotonic()
    source, target = Cluster(namespace, SOURCE), Cluster(namespace, TARGET)
    apply(with_object_storage(cluster_manifest(namespace, SOURCE, 3), object_store))
    wait_ready(SOURCE, namespace)
    pods = [f"{SOURCE}-{i}" for i in range(3)]
    for i in range(KEYS):
        reply = source.sidecars.request(f"pods/{pods[i % 3]}", "PUT", f"_cluster/metadata/app/key-{i}", {"n": i})
        assert reply.status == 200, reply
    expected = every_key(source, pods[0])
    cluster_uuid = source.status()["clusterUUID"]
    health = source.sidecars.request(f"pods/{pods[1]}", "GET", "_cluster/health").body
    assert health["archive_problem"] is None, health
    rendered = kubectl("-n", namespace, "get", "statefulset,configmap,pod", "-o", "json").stdout
    for line in (object_store.data.parent / "env").read_text().splitlines():
        assert line.split("=", 1)[1] not in rendered, "a credential is written into a manifest"

    # A snapshot into the bucket, on request, through the operator.
    kubectl("-n", namespace, "annotate", f"ccl/{SOURCE}", "coordinated.dev/snapshot-request=s3-1", "--overwrite")
    snapshots = wait_until(
        "the requested snapshot in the status",
        lambda: (s := source.status().get("snapshots") or {}).get("lastRequest") == "s3-1" and s,
        timeout=180,
        interval=1,
    )
    taken = snapshots.get("lastSnapshot")
    assert taken, snapshots
    assert [p.name for p in object_store.objects(SNAPSHOTS, "snapshots") if p.name.startswith("snap-")] == [
        f"snap-{taken}.dat"
    ]

    # Deleted: each pod stops gracefully and archives its last segment first.
    remove_cluster(namespace, SOURCE)
    wait_until("the pods gone", lambda: not source.pods(), timeout=180, interval=1)
    archived = object_store.objects(HISTORIES, f"e2e/{cluster_uuid}")
    folders = {p.parent.name for p in archived}
    assert len(folders) == 3, f"every node's history is in the archive: {archived}"
    # Archived segments are compressed, in format 2: count the events the audit reads from them (format 1).
    archived_events = sum(len(line.events or ()) for p in archived for line in expanded_lines(p))

    audit = run_spark_submit_audit(
        source,
        3,
        INPUT=f"s3://{HISTORIES}/e2e/{cluster_uuid}",
        EXECUTORS="2",
        S3_ENDPOINT=object_store.endpoint,
        S3_CREDENTIALS_SECRET=SECRET,
    )
    assert len(audit.executors) == 2, f"2 executors asked for, pods seen running: {audit.executors}"
    report = audit.report
    assert report["ok"] is True, report["violations"][:5]
    assert report["nodes"] == 3 and report["malformed_lines"] == 0
    # All of it, but what a node recorded after the last state its master's archive settles (nearly nothing once
    # every pod has stopped).
    assert archived_events * 0.95 <= report["events"] <= archived_events, (report["events"], archived_events)
    figure(
        f"audit of the archive from s3a:// (spark-submit, 2 executors): {report['events']} of {archived_events} "
        f"archived events, ok, {audit.audit_seconds:.1f} s"
    )

    # A new cluster, restored from the snapshot in the bucket.
    restore_started = time.monotonic()
    apply(with_object_storage(cluster_manifest(namespace, TARGET, 1), object_store, restoreFrom={"snapshot": taken}))
    restored = wait_until(
        "the restore in the status",
        lambda: (r := target.status().get("restore") or {}).get("completed") and r,
        timeout=300,
        interval=1,
    )
    assert restored["snapshot"] == taken and restored["keys"] == KEYS
    assert target.status()["clusterUUID"] != cluster_uuid
    assert every_key(target, f"{TARGET}-0") == expected  # every key, value, version and create_version
    figure(
        f"object storage: archive, audit, snapshot and restore in {time.monotonic() - started:.0f} s "
        f"(restore {time.monotonic() - restore_started:.0f} s)"
    )
    remove_cluster(namespace, TARGET)


BOUNDED = "bounded"
RETENTION = "64kb"
SEGMENT = "16kb"
# Each segment file's size and name: whatever the sidecar's image holds, its Python reads the folder.
HISTORY_FILES = (
    "import pathlib\n"
    "for p in sorted(pathlib.Path('/data/history').glob('segment-*')):\n"
    "    try: print(p.stat().st_size, p.name)\n"
    "    except FileNotFoundError: pass\n"
)


def segment_first_seq(name: str) -> int:
    return int(name.removeprefix("segment-").split(".", 1)[0])


def test_a_node_under_steady_writes_keeps_its_disk_bounded(
    operator_release: str, namespace: str, object_store: ObjectStore, figure: Figure
) -> None:
    """One node with a small retention and an archive takes writes until retention has deleted archived segments;
    its history's segments on disk, sampled throughout, stay within the retention plus two segments (the open one
    and one closed but not compressed yet), while the archive keeps the deleted ones."""
    cluster = Cluster(namespace, BOUNDED)
    settings = {"history.retention.max_size": RETENTION, "history.segment_size": SEGMENT}
    apply(with_object_storage(cluster_manifest(namespace, BOUNDED, 1, settings=settings), object_store))
    wait_ready(BOUNDED, namespace)
    pod = f"{BOUNDED}-0"
    limit = (64 << 10) + 2 * (16 << 10)
    sizes: list[int] = []
    oldest_kept = 1
    deadline = time.monotonic() + 120
    i = 0
    while time.monotonic() < deadline and (oldest_kept == 1 or len(sizes) < 5):
        for _ in range(100):
            value = {"i": i, "pad": "x" * 200}
            assert cluster.sidecars.request(f"pods/{pod}", "PUT", f"_cluster/metadata/k{i % 500}", value).status == 200
            i += 1
        listing = kubectl("-n", namespace, "exec", pod, "-c", "sidecar", "--", "python", "-c", HISTORY_FILES).stdout
        files = [line.split() for line in listing.splitlines() if line.strip()]
        sizes.append(sum(int(size) for size, _ in files))
        oldest_kept = segment_first_seq(files[0][1]) if files else 1
    assert oldest_kept > 1, f"no retention cut within 120 s ({i} writes, history sizes {sizes})"
    assert max(sizes) <= limit, f"history on disk reached {max(sizes)} bytes (limit {limit}): {sizes}"
    uuid = cluster.status()["clusterUUID"]
    archived = object_store.objects(HISTORIES, f"e2e/{uuid}")
    assert any(segment_first_seq(p.name) < oldest_kept for p in archived), (
        "the archive holds the segments retention deleted"
    )
    figure(
        f"bounded disk: {i} writes, history on disk at most {max(sizes) / 2**10:.0f} KiB "
        f"(retention {RETENTION}), archive {sum(p.stat().st_size for p in archived) / 2**10:.0f} KiB"
    )
    remove_cluster(namespace, BOUNDED)
