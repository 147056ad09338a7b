"""Inputs written by a newer release: `coordinated audit` refuses a checkpoint or a history segment of a format
newer than it reads as unusable input (exit 2, not 3: a rerun of the same release cannot read them either),
naming the file, the format and the release that wrote it, and changes nothing. The checkpoints it writes say
which release wrote them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import zstandard
from pyspark.sql import SparkSession

from coordinated.audit import segments
from coordinated.audit.checkpoint import Checkpoint
from coordinated.audit.cli import main
from coordinated.audit.reading import UnusableInput
from coordinated.audit.synth import SynthConfig, generate
from coordinated.release import installed_release

RELEASE = installed_release()
FORMAT_3 = b'{"format":3,"release":"0.3.0","seq":1,"ts":1.0,"node":"n","type":"term","term":1}\n'


def test_a_checkpoint_of_a_newer_format_is_unusable_input_naming_the_release(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_text(json.dumps({"format": 2, "release": "0.3.0", "nodes": "of another shape"}))
    with pytest.raises(UnusableInput) as refused:
        Checkpoint.read(path)
    assert str(refused.value) == (
        f"checkpoint {path} is of format 2, written by coordinated 0.3.0; this release ({RELEASE}) reads formats "
        "up to 1. Nothing was changed, and the file is not damaged: run coordinated 0.3.0 or later on it"
    )
    assert json.loads(Checkpoint().to_text())["release"] == RELEASE


@pytest.mark.parametrize(("compressed", "where"), [(False, "driver"), (True, "driver"), (True, "task")])
def test_a_history_segment_of_a_newer_format_is_unusable_input_naming_the_release(
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    compressed: bool,
    where: str,
) -> None:
    """Local segments are looked at before Spark reads them; an object store's, by the task that reads them."""
    if where == "task":
        monkeypatch.setattr(segments, "newer_format_problem", lambda files: None)
    generate(SynthConfig(events=200, seed=3, nodes=3)).write(tmp_path / "h")
    name = "segment-000000000001.jsonl" + (".zst" if compressed else "")
    newer = tmp_path / "h" / "node-9" / name
    newer.parent.mkdir()
    newer.write_bytes(zstandard.ZstdCompressor().compress(FORMAT_3) if compressed else FORMAT_3)
    before = newer.read_bytes()
    code = main([str(tmp_path / "h"), "--report-dir", str(tmp_path / "r"), "--no-html"])
    assert code == 2
    assert (
        f"is of format 3, written by coordinated 0.3.0; this release ({RELEASE}) reads formats up to 2. Nothing "
        "was changed, and the file is not damaged: run coordinated 0.3.0 or later on it" in capsys.readouterr().err
    )
    assert newer.read_bytes() == before and not (tmp_path / "r" / "audit-report.json").exists()
