"""The release has one source, the project's `version` in pyproject.toml: the installed distributions and the
`coordinated --version` line follow it (the image's label, the chart and every image reference:
tests/image/test_release_version.py)."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

from click.testing import CliRunner

from coordinated.cli import cli
from coordinated.coordination.wire_versions import CURRENT
from coordinated.release import installed_release

REPO = Path(__file__).resolve().parents[2]
RELEASE = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def test_the_installed_distributions_are_the_release() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", RELEASE)
    assert importlib.metadata.version("coordinated-cluster") == RELEASE == installed_release()
    assert importlib.metadata.version("coordinated-client") == RELEASE


def test_coordinated_version_prints_the_release_and_the_wire_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"coordinated {RELEASE} (wire version {CURRENT})\n"
