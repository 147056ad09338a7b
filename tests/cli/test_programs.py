"""The `coordinated` command names no deployable: each distribution registers its programs through entry points
(pyproject.toml, `coordinated.commands`), and `coordinated --help` still lists them all beside the command-line
client's commands; a program's light command loads the program only when it runs."""

from __future__ import annotations

import ast
import json
import sys
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import click
from child_processes import ChildProcesses
from click.testing import CliRunner

import coordinated.cli
from coordinated.cli import CLIENT_COMMANDS, cli, registered_programs
from coordinated.programs import COMMAND_GROUP

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
REGISTERED: dict[str, str] = PYPROJECT["entry-points"][COMMAND_GROUP]
PROGRAMS = {"node", "node-tool", "demo", "audit", "operator", "simulate"}  # docs/cli.md and the chart use them

# What a program's light command must not import: the programs' own modules and the libraries they start with.
RUNTIMES = (
    "coordinated.sidecar.cli",
    "coordinated.sidecar.node",
    "coordinated.sidecar.node_tool",
    "coordinated.audit.cli",
    "coordinated.audit.schema",
    "coordinated.operator.cli",
    "coordinated.simulation.cli",
    "coordinated.simulation.cluster",
    "coordinated.tools.demo",
    "aiohttp",
    "uvloop",
    "pyspark",
    "kopf",
)


def test_every_program_is_registered_and_installed_as_pyproject_says() -> None:
    assert set(REGISTERED) == PROGRAMS
    installed = {entry.name: entry.value for entry in entry_points(group=COMMAND_GROUP)}
    assert installed == REGISTERED, "the installed metadata is stale: run make install"
    assert not PROGRAMS & set(CLIENT_COMMANDS)
    for name, entry in registered_programs().items():
        command = entry.load()
        assert isinstance(command, click.Command) and command.name == name, name


def test_help_lists_every_program_and_every_client_command() -> None:
    answer = CliRunner().invoke(cli, ["--help"], prog_name="coordinated")
    assert answer.exit_code == 0, answer.output
    listed = answer.output.split("Commands:", 1)[1]
    names = [line.split()[0] for line in listed.splitlines() if line.startswith("  ") and not line.startswith("   ")]
    assert sorted(names) == sorted(PROGRAMS | set(CLIENT_COMMANDS))
    assert "run one sidecar node in the foreground" in listed and "audit history files" in listed


def test_the_command_names_no_deployable() -> None:
    """The umbrella names the client's command modules, the programs' contract (`coordinated.programs`) and the
    release it prints (`coordinated.release`, read only for --version), nothing else of the tree: no program, and
    no module of another deployable."""
    tree = ast.parse(Path(str(coordinated.cli.__file__)).read_text())
    named = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("coordinated.")
    }
    named |= {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("coordinated")
    }
    assert named == {module for module, _, _ in CLIENT_COMMANDS.values()} | {
        "coordinated.programs",
        "coordinated.release",
    }


def test_a_program_gets_the_rest_of_the_command_line_and_its_exit_code_is_the_commands() -> None:
    runner = CliRunner()
    helped = runner.invoke(cli, ["node-tool", "--help"], prog_name="coordinated")
    assert helped.exit_code == 0 and "unsafe-bootstrap" in helped.output, helped.output
    usage = runner.invoke(cli, ["node-tool"], prog_name="coordinated")  # its own parser's usage error
    assert usage.exit_code == 2 and "node-tool" in usage.output, usage.output


def test_version_is_the_release() -> None:
    answer = CliRunner().invoke(cli, ["--version"], prog_name="coordinated")
    assert answer.exit_code == 0 and answer.output.startswith(f"coordinated {PYPROJECT['version']} (wire version ")


LIST = """
import json, sys
from coordinated.cli import main
code = main(["--help"])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def test_help_loads_no_program(processes: ChildProcesses) -> None:
    """`coordinated --help` (and completion, which lists the same) imports each program's light command only."""
    done = processes.run([sys.executable, "-c", LIST], capture_output=True, text=True)
    report = json.loads(done.stderr.splitlines()[-1])
    assert report["code"] == 0 and "node-tool" in done.stdout, done.stderr
    assert [name for name in report["modules"] if name.startswith(RUNTIMES)] == []
    assert {"coordinated.sidecar.commands", "coordinated.audit.commands"} <= set(report["modules"])


# The one program whose command line argparse parses: the e2e harness's shell scripts run it with the system's
# python3, standard library only, before any virtualenv exists.
ARGPARSE_ALLOWED = {"e2e/release.py": "run by the e2e shell scripts with the system's python3 (standard library only)"}
FOLDERS = (
    "core",
    "s3",
    "sidecar",
    "operator",
    "spark-jobs",
    "tools",
    "client",
    "bench",
    "chaos",
    "scripts",
    "e2e",
    "tests",
)


def argparse_users() -> set[str]:
    found = set()
    for folder in FOLDERS:
        for path in (REPO / folder).rglob("*.py"):
            # Not in hidden folders, which git ignores: e2e/.state holds the containers' own Python standard library
            # while the e2e harness is up.
            if any(part.startswith(".") for part in path.relative_to(REPO).parts):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                names = (
                    [alias.name for alias in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else []
                )
                if any(name.split(".")[0] == "argparse" for name in names):
                    found.add(str(path.relative_to(REPO)))
    return found


def test_every_program_parses_its_command_line_with_click() -> None:
    assert argparse_users() == set(ARGPARSE_ALLOWED)
