"""Every Python example of docs/applications.md runs as it is, in the order of the page, against a real node,
and must finish without an error (an example that watches for ever stops itself)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinated.tools.localcluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

DOCS = Path(__file__).parents[2] / "docs" / "applications.md"


def examples(section: tuple[str, str] | None = None) -> list[str]:
    """The page's Python examples (or those between two headings)."""
    text = DOCS.read_text()
    if section is not None:
        text = text[text.index(section[0]) : text.index(section[1])]
    return re.findall(r"```python\n(.*?)```", text, re.S)


RECIPES = ("## Recipes:", "### What the guarantee is")


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    cluster = LocalCluster(Path(tmp_path_factory.mktemp("examples")))
    try:
        yield cluster.bootstrap(1)[0].url
    finally:
        cluster.stop_all(graceful=False)


def test_the_recipes_section_has_an_example_per_recipe() -> None:
    found = "\n".join(examples(RECIPES))
    for recipe in ["Lock", "LeaderElection", "Semaphore", "ReadWriteLock", "DoubleBarrier", "Barrier"]:
        assert f"{recipe}(" in found, recipe
    for recipe in ["Counter", "Queue", "GroupMember", "ConnectionState"]:
        assert recipe in found, recipe


@pytest.mark.parametrize("index", range(len(examples())))
def test_example_runs(index: int, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COORDINATED_URL", url)
    monkeypatch.delenv("COORDINATED_TOKEN", raising=False)
    exec(compile(examples()[index], f"{DOCS.name}, Python example {index}", "exec"), {"__name__": "example"})


def test_every_python_block_of_the_page_is_an_example_that_runs() -> None:
    """No Python block escapes the test: every fenced block marked python is one of the examples run above,
    and they are many (the recipes' and the client's)."""
    text = DOCS.read_text()
    assert text.count("```python") == len(examples()) >= 15
