"""The scenario scripts in scenarios/*.txt: each command's output must be the one written below it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from scenario_runner import run_script

SCRIPTS = sorted((Path(__file__).parent / "scenarios").glob("*.txt"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[script.stem for script in SCRIPTS])
def test_scenario_script(script: Path, rewrite: bool) -> None:
    written, printed = run_script(script)
    if rewrite:
        script.write_text(printed)
        return
    assert printed == written, f"{script.name}: the simulator printed\n{printed}"
