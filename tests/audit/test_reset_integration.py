"""The audit of real histories across `coordinated node-tool`: the node-tool integration scenarios (quorum
lost for good, unsafe-bootstrap of the survivor, new nodes joining; an old member joining after
detach-cluster; persistent settings removed from every stopped node) run on real node processes, then every
history is audited: exit 0, resets listed.

The scenarios delete the lost nodes' data directories; their histories are kept aside first, as an operator
ships histories off the nodes: without the lost master's `committed` events its followers' applies cannot be
judged (the audit would rightly report them under applied-only-committed)."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from coordinated.audit.cli import main
from coordinated.sidecar.storage.persistence import HISTORY_DIR
from coordinated.tools.localcluster import LocalCluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sidecar"))
import test_node_tool_integration as scenarios

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def clusters(tmp_path: Path) -> Iterator[tuple[Callable[..., LocalCluster], list[LocalCluster]]]:
    made: list[LocalCluster] = []

    def make(**kwargs: object) -> LocalCluster:
        cluster = LocalCluster(tmp_path / f"cluster{len(made)}", **kwargs)  # type: ignore[arg-type]
        made.append(cluster)
        return cluster

    yield make, made
    for cluster in made:
        cluster.stop_all(graceful=False)


def test_histories_across_unsafe_bootstrap_detach_and_remove_settings_pass_the_audit(
    spark: SparkSession,
    tmp_path: Path,
    clusters: tuple[Callable[..., LocalCluster], list[LocalCluster]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    make, made = clusters
    kept: list[str] = []
    rmtree = shutil.rmtree  # `scenarios.shutil` is this same module: keep the real one

    def lose(data_dir: Path) -> None:
        kept.append(str(shutil.copytree(data_dir / HISTORY_DIR, tmp_path / "lost" / str(len(kept)))))
        rmtree(data_dir)

    monkeypatch.setattr(scenarios.shutil, "rmtree", lose)
    scenarios.test_unsafe_bootstrap_of_the_survivor_then_two_new_nodes(make)
    scenarios.test_an_old_node_joins_the_new_cluster_only_after_detach(make)
    scenarios.test_remove_settings_on_every_stopped_node_without_a_master(make)
    for cluster in made:
        cluster.stop_all(graceful=True)
    histories = [
        str(node.data_dir / HISTORY_DIR)
        for cluster in made
        for node in cluster.nodes.values()
        if (node.data_dir / HISTORY_DIR).is_dir()
    ]
    # The first scenario loses two data directories, the second one; the third keeps its three.
    assert (len(histories), len(kept)) == (8, 3)

    code = main(
        [*histories, *kept, "--report-dir", str(tmp_path / "report"), "--no-html", "--spark-master", "local[2]"]
    )
    report = json.loads((tmp_path / "report" / "audit-report.json").read_text())
    assert report["violations"] == [] and code == 0
    assert sorted(r["type"] for r in report["resets"]) == ["detached", "unsafe_bootstrap", "unsafe_bootstrap"]
    for reset in report["resets"]:
        if reset["type"] == "unsafe_bootstrap":
            assert reset["cluster_uuid"] != reset["previous_cluster_uuid"]
