"""The audit accepts the histories of real nodes that took and restored snapshots: the snapshot events are known
types, and a restore's version jump keeps the committed chain intact."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from audit_helpers import audit_dir
from pyspark.sql import SparkSession

from coordinated.sidecar.events.history_read import read_events_after
from coordinated.tools.localcluster import FAST_SETTINGS, LocalCluster

pytestmark = pytest.mark.timeout(300)


def test_histories_with_snapshot_events_audit_clean(spark: SparkSession, tmp_path: Path) -> None:
    root = tmp_path / "backups"
    cluster = LocalCluster(tmp_path / "cluster", settings={**FAST_SETTINGS, "path.repo": str(root)})
    try:
        nodes = cluster.bootstrap(3)
        for i in range(5):
            assert nodes[i % 3].put(f"/_cluster/metadata/k{i}", i)[0] == 200
        assert nodes[0].put("/_snapshot/r", {"type": "fs", "settings": {"location": str(root)}})[0] == 200
        assert nodes[1].put("/_snapshot/r/s1?wait_for_completion=true")[0] == 200
        for i in range(20):  # versions move well past the snapshot's
            assert nodes[2].put(f"/_cluster/metadata/later{i}", i)[0] == 200
        status, restored = nodes[2].request("POST", "/_snapshot/r/s1/_restore")
        assert status == 200, restored
        assert nodes[0].put("/_cluster/metadata/after", 1)[0] == 200
    finally:
        cluster.stop_all()
    # As GET /_history reads them: format-1 events, whatever the segments' format and compression.
    lines = [json.loads(line) for node in nodes for line in read_events_after(node.data_dir / "history", 0)]
    assert {"snapshot_taken", "snapshot_restored"} <= {event["type"] for event in lines}
    histories = tmp_path / "histories"
    for node in nodes:
        shutil.copytree(node.data_dir / "history", histories / node.name)
    report = audit_dir(spark, histories)
    assert report["ok"], report["violations"]
    assert report["malformed_lines"] == 0
