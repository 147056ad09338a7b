"""The release has one source, the project's `version` in pyproject.toml: the installed distributions, the
`coordinated --version` line, the image's label, the chart's appVersion and every image tag in the repository
follow it."""

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
# Records of what a benchmark measured name the release they measured, not this one.
MEASURED = {"docs/performance.md", "docs/performance.json"}


def test_the_installed_distributions_are_the_release() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", RELEASE)
    assert importlib.metadata.version("coordinated-cluster") == RELEASE == installed_release()
    assert importlib.metadata.version("coordinated-client") == RELEASE


def test_coordinated_version_prints_the_release_and_the_wire_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"coordinated {RELEASE} (wire version {CURRENT})\n"


def test_the_image_label_and_the_chart_follow_the_release() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    runtime = dockerfile[dockerfile.index("AS runtime") :]
    assert re.search(rf'org\.opencontainers\.image\.version="{re.escape(RELEASE)}"', runtime)
    chart = (REPO / "charts" / "coordinated-cluster" / "Chart.yaml").read_text()
    assert re.search(rf'^appVersion: "{re.escape(RELEASE)}"$', chart, re.MULTILINE)
    assert re.search(rf"^version: {re.escape(RELEASE)}$", chart, re.MULTILINE)


def source_files() -> list[Path]:
    """The repository's files, without what tools and runs leave in it (virtualenv, caches, e2e state)."""
    skipped = {".git", ".venv", ".hypothesis", ".mypy_cache", ".ruff_cache", ".pytest_cache", "__pycache__", ".state"}
    found = []
    for path in REPO.rglob("*"):
        parts = path.relative_to(REPO).parts
        if path.is_file() and not skipped & set(parts) and parts[0] != "tests":
            found.append(path)
    return found


def test_every_image_tag_in_the_repository_is_the_release() -> None:
    tags: dict[str, set[str]] = {}
    for path in source_files():
        name = str(path.relative_to(REPO))
        if name in MEASURED:
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found = set(re.findall(r"coordinated-cluster:(\d+\.\d+\.\d+)", text))
        if found:
            tags[name] = found
    assert tags, "no image tag found: the scan is broken"
    assert {name: found for name, found in tags.items() if found != {RELEASE}} == {}
