"""The suite's own rules about processes (tests/conftest.py), run on small inner test files: a test is marked
from the fixtures it uses, and under --no-processes (make test-fast) a process started any other way fails the
test, naming the fixtures to use. The inner runs are in-process: under --no-processes nothing is started."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = (Path(__file__).parent / "conftest.py").read_text()

INNER = """
import asyncio
import os
import subprocess


def test_a_subprocess():
    subprocess.run(["true"], check=True)


def test_an_asyncio_subprocess():
    async def start():
        await asyncio.create_subprocess_exec("true")

    asyncio.run(start())


def test_a_spawn():
    os.posix_spawn("/bin/true", ["true"], os.environ)


def test_a_process_from_a_fixture(processes):
    processes.run(["true"], check=True)


def test_no_process():
    assert True
"""


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # the conftest's helpers: child_processes, ...
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_inner=INNER)
    return pytester


def test_a_process_started_without_a_fixture_fails_under_no_processes(inner: pytest.Pytester) -> None:
    result = inner.runpytest("--no-processes", "-m", "not integration", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=3, deselected=1)
    result.stdout.fnmatch_lines(["*ProcessRefused: Popen under `make test-fast`*PROCESS_FIXTURES*processes*"])
    result.stdout.fnmatch_lines(["*ProcessRefused: asyncio.create_subprocess_exec under `make test-fast`*"])
    result.stdout.fnmatch_lines(["*ProcessRefused: os.posix_spawn under `make test-fast`*"])


def test_a_test_using_a_process_fixture_is_marked_integration(inner: pytest.Pytester) -> None:
    result = inner.runpytest("--collect-only", "-q", "-m", "integration", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["test_inner.py::test_a_process_from_a_fixture", "*1/5 tests collected*"])


def test_every_process_fixture_exists() -> None:
    """A renamed fixture would silently stop marking its tests."""
    tree = ast.parse(CONFTEST)
    listed = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and node.target.id == "PROCESS_FIXTURES"
    )
    fixture = re.compile(r"@pytest\.fixture(?:\([^)]*\))?\s*\ndef (\w+)\(")
    defined = {name for path in Path(__file__).parent.rglob("*.py") for name in fixture.findall(path.read_text())}
    assert set(listed) <= defined, sorted(set(listed) - defined)
