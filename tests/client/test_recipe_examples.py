"""Every example of docs/applications.md's recipes section runs as it is, against a real node."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinated.tools.localcluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

DOCS = Path(__file__).parents[2] / "docs" / "applications.md"


def examples() -> list[str]:
    text = DOCS.read_text()
    section = text[text.index("## Recipes:") : text.index("### What the guarantee is")]
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    cluster = LocalCluster(Path(tmp_path_factory.mktemp("examples")))
    try:
        yield cluster.bootstrap(1)[0].url
    finally:
        cluster.stop_all(graceful=False)


def test_the_recipes_section_has_an_example_per_recipe() -> None:
    found = "\n".join(examples())
    for recipe in ["Lock", "LeaderElection", "Semaphore", "ReadWriteLock", "DoubleBarrier", "Barrier"]:
        assert f"{recipe}(" in found, recipe
    for recipe in ["Counter", "Queue", "GroupMember", "ConnectionState"]:
        assert recipe in found, recipe


@pytest.mark.parametrize("index", range(len(examples())))
def test_example_runs(index: int, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COORDINATED_URL", url)
    monkeypatch.delenv("COORDINATED_TOKEN", raising=False)
    exec(compile(examples()[index], f"{DOCS.name}, recipe example {index}", "exec"), {})
