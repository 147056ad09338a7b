"""`python -m bench`: one entry point with a subcommand per suite, and docs/performance.md rendered from one run's
results file, so that the page cannot drift from the figures it claims."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import click
import pytest
from child_processes import ChildProcesses
from click.testing import CliRunner

from bench import ROOT
from bench import report as reports
from bench.cli import cli
from bench.harness import results

PAGE = ROOT / "docs" / "performance.md"
RUN = ROOT / "docs" / "performance.json"

OURS_SEQ, ETCD_SEQ = [3.0, 2.0, 4.5], [1.0, 1.5, 2.0]
OURS_64, ETCD_64 = [2100.0, 1900.0, 2000.0], [4000.0, 3800.0, 3900.0]


def peers_section(size: int) -> dict[str, Any]:
    def figures(seq: list[float], tput: list[float]) -> dict[str, list[float]]:
        return {
            "seq_p50": seq,
            "seq_p99": [2 * v for v in seq],
            "tput_1": [300.0],
            "tput_16": [900.0],
            "tput_64": tput,
            "rss_mb": [60.0],
        }

    return {
        "options": {"rounds": 3, "writes": 200, "seconds": 5.0},
        "etcd_check": {"flagged": False, "reasons": []},
        "results": {f"coordinated {size}n": figures(OURS_SEQ, OURS_64), f"etcd {size}n": figures(ETCD_SEQ, ETCD_64)},
    }


def test_every_suite_has_a_subcommand() -> None:
    wanted = {"peers", "hot-keys", "watch-fanout", "history-bytes", "audit", "soak", "failover", "sim", "report"}
    wanted.add("headline")
    assert wanted <= set(cli.commands)
    assert {"scale", "incremental", "engines"} <= set(cli.commands["audit"].commands)  # type: ignore[attr-defined]


def test_the_hot_keys_text_gives_each_point_against_etcd() -> None:
    figures = {"hot_16_on_1": [100.0, 120.0, 80.0], "tput_16": [400.0], "hot_64_on_16": [800.0], "tput_64": [900.0]}
    etcd = {"hot_16_on_1": [2000.0], "tput_16": [2500.0], "hot_64_on_16": [3000.0], "tput_64": [4000.0]}
    section = {
        "etcd_check": {"flagged": False, "reasons": []},
        "results": {"coordinated 3n": figures, "etcd 3n": etcd, "coordinated 3n [main]": {"hot_16_on_1": [600.0]}},
    }
    text = reports.hot_keys_text(section)
    assert "| point | coordinated 3n | etcd 3n | coordinated 3n [main] |" in text
    assert "| 16 clients on 1 key | 100 (80-120) **0.05x** | 2000 | 600 **0.30x** |" in text
    assert "| 64 clients on their own keys | 900 **0.23x** | 4000 | n/a |" in text


# The report names the machine: platform.processor() runs `uname -p`.
@pytest.mark.usefixtures("processes")
def test_the_report_gives_ours_over_etcd_as_medians_of_the_rounds(tmp_path: Path) -> None:
    run = tmp_path / "results.json"
    results.record(run, "peers", peers_section(3))
    page = CliRunner().invoke(cli, ["report", str(run)], catch_exceptions=False).output
    seq = statistics.median(OURS_SEQ) / statistics.median(ETCD_SEQ)
    tput = statistics.median(OURS_64) / statistics.median(ETCD_64)
    assert f"| sequential write, p50 | lower | **{seq:.2f}x**" in page
    assert f"| throughput, 64 clients | higher | **{tput:.2f}x**" in page
    assert "5 nodes" not in page  # not measured, not claimed
    assert "make bench" in page


# The report names the machine: platform.processor() runs `uname -p`.
@pytest.mark.usefixtures("processes")
def test_each_suite_adds_its_section_to_one_file(tmp_path: Path) -> None:
    run = tmp_path / "results.json"
    results.record(run, "peers", peers_section(3))
    machine = json.loads(run.read_text())["machine"]
    results.record(run, "history-bytes", {"payload_bytes": 15.0, "options": {"nodes": 3, "writes": 10}, "rows": []})
    written = results.read(run)
    assert set(written["suites"]) == {"peers", "history-bytes"}
    assert written["machine"] == machine and written["machine"]["cpus"] >= 1


# The report names the machine: platform.processor() runs `uname -p`.
@pytest.mark.usefixtures("processes")
def test_check_fails_on_a_page_another_run_rendered(tmp_path: Path) -> None:
    run = tmp_path / "results.json"
    results.record(run, "peers", peers_section(3))
    page = tmp_path / "performance.md"
    runner = CliRunner()
    page.write_text(runner.invoke(cli, ["report", str(run)]).output)
    assert runner.invoke(cli, ["report", str(run), "--check", str(page)]).exit_code == 0
    results.record(run, "peers", peers_section(5))
    stale = runner.invoke(cli, ["report", str(run), "--check", str(page)])
    assert stale.exit_code != 0 and "regenerate" in stale.output


def test_a_file_that_is_not_a_run_gets_an_error_that_names_it(tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"results": {}}))
    answer = CliRunner().invoke(cli, ["report", str(other)])
    assert answer.exit_code != 0 and "not a results file" in answer.output and str(other) in answer.output


def test_docs_performance_md_is_the_report_of_its_run() -> None:
    answer = CliRunner().invoke(cli, ["report", str(RUN), "--check", str(PAGE)])
    assert answer.exit_code == 0, answer.output


# The report names the machine: platform.processor() runs `uname -p`.
@pytest.mark.usefixtures("processes")
def test_options_given_win_over_the_quick_defaults_even_when_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.suites import peers

    seen: list[peers.PeersOptions] = []

    def run(options: peers.PeersOptions) -> dict[str, Any]:
        seen.append(options)
        return peers_section(3)

    monkeypatch.setattr(peers, "run", run)
    given = ["peers", "--quick", "--idle", "0", "--rounds", "2", "--ab", "a=b", "--ab-tree", "r1", "--ab-tree", "r2"]
    answer = CliRunner().invoke(cli, given)
    assert answer.exit_code == 0, answer.output
    (options,) = seen
    assert (options.idle, options.rounds, options.ab, options.ab_tree) == (0, 2, ["a=b"], ["r1", "r2"])
    assert options.writes == peers.PeersOptions.quick().writes  # not given: the quick default


def suite_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every leaf command's words (`("audit", "engines")`), walking the groups."""
    found: list[tuple[str, ...]] = []
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found += suite_paths(command, (*prefix, name))
        else:
            found.append((*prefix, name))
    return found


@pytest.mark.parametrize("words", suite_paths(cli), ids=" ".join)
def test_every_suite_prints_its_help(words: tuple[str, ...]) -> None:
    answer = CliRunner().invoke(cli, [*words, "--help"], prog_name="python -m bench")
    assert answer.exit_code == 0, answer.output
    assert "usage:" in answer.output.lower() and "--help" in answer.output


def test_every_suite_parses_its_options_with_click_none_passes_them_through() -> None:
    for words in suite_paths(cli):
        group: click.Command = cli
        for word in words:
            assert isinstance(group, click.Group)
            group = group.commands[word]
        assert not any(isinstance(param, click.Argument) and param.nargs == -1 for param in group.params), words


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["profile", "--set", "no-equals-sign"], "[no-equals-sign] must be NAME=VALUE"),
        (["state-size", "--source", "=dir"], "[=dir] must be NAME=VALUE"),
        (["state-size", "--only", "5 keys"], "['5 keys'] are not among"),
        (["transport-send", "--rounds", "0"], "--rounds"),
        (["audit", "engines", "--rounds", "2"], "give --input, or --events with --workdir"),
        (["soak"], "Missing option '--minutes'"),
        (["soak", "--minutes", "0"], "--minutes"),
        (["audit", "scale", "--conf", "no-equals-sign"], "[no-equals-sign] must be NAME=VALUE"),
        (["audit", "incremental", "--layout", "bz2"], "--layout"),
    ],
)
def test_bad_suite_options_get_a_usage_error_that_names_them(args: list[str], says: str) -> None:
    answer = CliRunner().invoke(cli, args)
    assert answer.exit_code == 2 and says in answer.output, answer.output


def test_an_ab_tree_runs_every_part_a_node_imports_from_its_own_revision(
    tmp_path: Path, processes: ChildProcesses
) -> None:
    # The client's folder holds coordinated.key_names, which the core checks every key with: a tree without
    # it ran that module from the checkout instead of from its revision. (`processes`: exporting the tree
    # runs git.)
    from bench.harness.systems import tree_pythonpath
    from bench.suites import peers

    tree = tmp_path / "tree"
    peers.export_tree("HEAD", tree)
    assert (tree / "client" / "coordinated" / "key_names.py").is_file()
    assert (tree / "core" / "coordinated" / "coordination").is_dir()
    assert str(tree / "client") in tree_pythonpath(tree).split(":")
