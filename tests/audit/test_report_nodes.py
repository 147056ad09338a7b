"""The report names nodes as people know them (their pod names, next to the ids) and says when the histories
of nodes the states name are missing from the input (nodes removed with their volumes)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from audit_helpers import audit_dir
from pyspark.sql import SparkSession

from coordinated.audit.report import render_html
from coordinated.audit.schema import EVENT_SCHEMA
from coordinated.audit.synth import HistoryBuilder

CLUSTER = "the-cluster"


def removed_node_history(directory: Path) -> None:
    """a, b and c commit three states; c is removed (the voting configuration shrinks to a and b); two more
    states. Names are the ids upper-cased (the builder's `node_name`), as pod names are on Kubernetes."""
    hb = HistoryBuilder(["a", "b", "c"], CLUSTER, extra_fields=True)
    hb.elect("a", 1, ["b", "c"])
    for _ in range(3):
        hb.publish("a", ["b", "c"])
    hb.publish("a", ["b"], state=hb.make_state("a", config=("a", "b")))
    hb.publish("a", ["b"])
    hb.write(directory)


@pytest.fixture(scope="module")
def reports(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    out = {}
    for name, lost in (("complete", []), ("c-lost", ["c"]), ("b-and-c-lost", ["b", "c"])):
        directory = tmp_path_factory.mktemp(name) / "history"
        removed_node_history(directory)
        for node in lost:
            shutil.rmtree(directory / node)
        out[name] = audit_dir(spark, directory)
    return out


def test_no_history_is_missing_when_every_named_node_has_one(reports: dict[str, dict[str, Any]]) -> None:
    report = reports["complete"]
    assert report["ok"] is True and report["missing_histories"] == []
    assert "none: every node the states name has its history" in render_html(report, {})


def test_a_removed_node_without_its_history_is_reported_missing(reports: dict[str, dict[str, Any]]) -> None:
    report = reports["c-lost"]
    # Not a violation (nothing can be checked about it), but the report says it.
    assert report["ok"] is True
    assert report["missing_histories"] == [{"cluster": CLUSTER, "node": "c", "name": None}]
    page = render_html(report, {})
    assert "Histories missing for 1 node(s) the states name: c." in page


def test_every_missing_node_is_listed(reports: dict[str, dict[str, Any]]) -> None:
    missing = reports["b-and-c-lost"]["missing_histories"]
    assert [(m["cluster"], m["node"]) for m in missing] == [(CLUSTER, "b"), (CLUSTER, "c")]


def test_nodes_are_named_by_their_names_next_to_their_ids(reports: dict[str, dict[str, Any]]) -> None:
    report = reports["complete"]
    stats = report["stats"]
    assert stats["node_names"] == {"a": "A", "b": "B", "c": "C"}
    assert {key: node["name"] for key, node in stats["per_node"].items()} == {"a": "A", "b": "B", "c": "C"}
    page = render_html(report, {})
    assert "<td>a</td><td>A</td>" in page  # the nodes table: id, then name


def test_a_node_named_only_by_an_apply_is_reported_missing(spark: SparkSession, tmp_path: Path) -> None:
    """Every event's references count, not only those of accepted events and masters' commits: an apply that
    names a node no other event names reports that node's history missing, from JSONL and from Parquet (where
    the state table's pass scouts the input)."""
    directory = tmp_path / "history"
    removed_node_history(directory)
    (path,) = sorted((directory / "b").glob("*.jsonl"))
    lines = path.read_text().splitlines()
    last_apply = max(i for i, line in enumerate(lines) if json.loads(line)["type"] == "applied")
    event = json.loads(lines[last_apply])
    event["master"] = "z"
    lines[last_apply] = json.dumps(event)
    path.write_text("\n".join(lines) + "\n")
    compacted = tmp_path / "parquet"  # the Parquet path scouts in the state table's pass (observed)
    spark.read.schema(EVENT_SCHEMA).json(str(directory / "*")).coalesce(1).write.parquet(str(compacted))
    for report in (audit_dir(spark, directory), audit_dir(spark, compacted)):
        assert {(m["cluster"], m["node"]) for m in report["missing_histories"]} == {(CLUSTER, "z")}
