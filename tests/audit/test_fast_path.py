"""The state table's fast path: on a valid history no state needs the exact checks with the strings.

The checks read the numeric state table first and verify with the strings only the states it flags
(`prepare.suspect`). A fast path that stops working changes no verdict, because every state then takes the exact
check, but it makes every audit slower. This test catches that.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from coordinated.audit.prepare import prepare
from coordinated.audit.reading import load
from coordinated.audit.synth import SynthConfig, generate


def test_a_valid_history_flags_no_state_for_the_exact_checks(spark: SparkSession, tmp_path: Path) -> None:
    # Failed publications re-published by the next master, restarts and lagging nodes: the usual valid shapes.
    generate(SynthConfig(events=4000, seed=7, nodes=5, p_failed_publish=0.5, p_restart=0.3)).write(tmp_path / "h")
    inp = load(spark, [str(tmp_path / "h")])
    frames = prepare(spark, inp.events, scouted=inp.scout, scouting=inp.scouting, settle=inp.settle)
    try:
        committed = frames.table.filter(F.col("committed") & ~F.col("reset_root")).count()
        assert committed > 50  # many states whose quorum the fast path had to clear
        assert frames.flagged == []
    finally:
        frames.release()
        inp.release()
