"""`python -m bench SUITE ...`: one entry point, a subcommand per suite, as etcd's tools/benchmark has.

Each suite runs its systems in interleaved rounds on this machine, prints its figures and, with `--out FILE`,
adds its section to a results file (bench/harness/results.py). `headline` runs the suites that
docs/performance.md is made of into one file; `report` renders that page from it. The suites that are
driven by argparse in their own module (the audit, soak, the simulator's sweep, ...) get their arguments as
given: `python -m bench audit scale --help`. Suites import their systems' libraries (grpc, pysyncobj) only
when they run, so `report` works without the `[bench]` extra.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import click

from bench import report as reports
from bench.harness import results as results_file
from bench.harness.procs import bench_env, module_command

OUT = click.option(
    "--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="add this suite's section to FILE"
)
WORKDIR = click.option(
    "--workdir", type=click.Path(file_okay=False, path_type=Path), default=None, help="parent of the data dirs"
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
def cli() -> None:
    """coordinated-cluster's benchmarks, each against a peer (etcd, PySyncObj, DuckDB) or a floor.

    The method is in docs/benchmarking.md; what to expect, in docs/performance.md. Run them under
    `flock /tmp/bench.lock` on a shared machine.
    """


def save(out: Path | None, suite: str, section: dict[str, Any], workdir: Path | None = None) -> None:
    if out is not None:
        results_file.record(out, suite, section, workdir)
        click.echo(f"results: {suite} in {out}")


# -- the headline suites ------------------------------------------------------------------------------------


@cli.command()
@click.option("--quick", is_flag=True, help="a smoke run: 1 round, 50 writes, 2 s per throughput point")
@click.option("--rounds", type=click.IntRange(min=1), default=None, help="interleaved rounds (default 3)")
@click.option("--writes", type=click.IntRange(min=1), default=None, help="sequential writes per round (default 200)")
@click.option("--seconds", type=click.FloatRange(min=0.5), default=None, help="per throughput point (default 5)")
@click.option("--idle", type=click.FloatRange(min=0), default=None, help="idle seconds before reading RSS")
@click.option("--systems", default=None, help="comma-separated labels (default: ours and etcd at 3 and 5 nodes)")
@click.option("--tls", is_flag=True, help="only the cost of TLS, ours and etcd's, at 3 nodes")
@click.option("--cpu-hog", is_flag=True, help="measure every system twice: quiet, then with a busy loop on a core")
@click.option("--ab", multiple=True, metavar="SETTING=VALUE", help="also run 'coordinated 3n [SETTING=VALUE]'")
@click.option(
    "--ab-tree", multiple=True, metavar="REV", help="also run 'coordinated 3n [REV]', git revision REV (repeatable)"
)
@WORKDIR
@OUT
def peers(quick: bool, out: Path | None, **given: Any) -> None:
    """Sequential latency and 1/16/64-client throughput against etcd, at 3 and 5 nodes (the headline)."""
    from bench.suites import peers as suite

    # Only the options given: the others keep PeersOptions' defaults (or its quick ones).
    given = {name: value for name, value in given.items() if value is not None}
    given["ab"] = list(given["ab"])
    given["ab_tree"] = list(given["ab_tree"])
    options = suite.PeersOptions.quick(**given) if quick else suite.PeersOptions(**given)
    section = suite.run(options)
    click.echo(reports.peers_text(section))
    save(out, "peers", section, options.workdir)


@cli.command()
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--kill-trials", type=click.IntRange(min=0), default=4, show_default=True, help="kill -9 per round")
@click.option("--stop-trials", type=click.IntRange(min=0), default=1, show_default=True, help="SIGSTOP per round")
@click.option("--tuned-stop-trials", type=click.IntRange(min=0), default=3, show_default=True)
@click.option("--systems", default=None, help="comma-separated labels, e.g. 'coordinated 3n,etcd 3n'")
@WORKDIR
@OUT
def failover(out: Path | None, **given: Any) -> None:
    """The window a writer sees when the leader is killed or frozen, against etcd and PySyncObj."""
    from bench.suites import failover as suite

    options = suite.FailoverOptions(**given)
    section = suite.run(options)
    click.echo(reports.failover_text(section))
    save(out, "failover", section, options.workdir)


@cli.command("watch-fanout")
@click.option("--watchers", type=click.IntRange(min=1), multiple=True, help="watchers (repeatable; default 1000)")
@click.option("--writes", type=click.IntRange(min=1), default=30, show_default=True)
@click.option("--rounds", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--etcd/--no-etcd", default=True, show_default=True)
@click.option("--floor/--no-floor", default=True, show_default=True)
@click.option("--harnesses", type=click.IntRange(min=1), default=2, show_default=True, help="watcher processes")
@click.option("--raw-client", is_flag=True, help="read our streams and the floor's off the sockets (no aiohttp)")
@click.option("--etcd-per-connection", type=click.IntRange(min=1), multiple=True, help="default: 1 and 50")
@click.option("--via", type=click.Choice(["all", "followers"]), default="all", show_default=True)
@OUT
def watch_fanout(
    out: Path | None, watchers: tuple[int, ...], etcd_per_connection: tuple[int, ...], **given: Any
) -> None:
    """Many watchers on one prefix, one writer: delivery time and the master's CPU, against etcd and a floor."""
    from bench.suites import watch_fanout as suite

    options = suite.FanoutOptions(
        watchers=list(watchers or (1000,)), etcd_per_connection=list(etcd_per_connection or (1, 50)), **given
    )
    save(out, "watch-fanout", suite.run(options))


@cli.command("history-bytes")
@click.option("--writes", type=click.IntRange(min=1), default=20_000, show_default=True)
@click.option("--clients", type=click.IntRange(min=1), multiple=True, help="concurrent clients (default 1 and 8)")
@click.option("--nodes", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--baseline", default=None, help="another source tree measured in the same run")
@OUT
def history_bytes(out: Path | None, writes: int, clients: tuple[int, ...], nodes: int, baseline: str | None) -> None:
    """History bytes each node keeps per write, against the payload a write carries."""
    from bench.suites import history_bytes as suite

    save(out, "history-bytes", suite.run(writes, list(clients or (1, 8)), nodes, baseline))


@cli.command()
@click.option("--quick", is_flag=True, help="a smoke run of each suite")
@click.option(
    "--out", type=click.Path(dir_okay=False, path_type=Path), default=Path(reports.RESULTS), show_default=True
)
def headline(quick: bool, out: Path) -> None:
    """The suites docs/performance.md is made of, into one results file: peers, watch-fanout, history-bytes."""
    if out.exists():
        out.unlink()  # one run, one file
    # Each suite in a process of its own: etcd's gRPC stubs of two suites cannot share one protobuf pool, and
    # no suite inherits another's threads or memory.
    suites = [
        ["peers", *(["--quick"] if quick else [])],
        ["watch-fanout", "--watchers", "1000", "--etcd-per-connection", "1", "--writes", "10" if quick else "30"],
        ["history-bytes", "--writes", "500" if quick else "2000", "--clients", "1", "--clients", "8"],
    ]
    for suite in suites:
        click.echo(f"== {' '.join(suite)}", err=True)
        subprocess.run(module_command("bench", *suite, "--out", str(out)), check=True, env=bench_env())
    click.echo(f"\nnext: .venv/bin/python -m bench report {out} > docs/performance.md")


@cli.command()
@click.argument("results", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--check",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="fail unless this page is what RESULTS renders to (e.g. docs/performance.md)",
)
def report(results: Path, check: Path | None) -> None:
    """Render docs/performance.md from one run's results file (to stdout)."""
    try:
        page = reports.performance_page(results_file.read(results))
    except (ValueError, KeyError) as error:
        raise click.ClickException(f"{results}: cannot render a report: {error!r}") from error
    if check is None:
        click.echo(page, nl=False)
    elif check.read_text() != page:
        raise click.ClickException(f"{check} is not what {results} renders to: regenerate it with `bench report`")


@cli.command()
def sim() -> None:
    """The simulator's steps per second and time to stabilise at 5 and 25 nodes."""
    from bench.suites import sim as suite

    suite.main()


# -- suites that parse their own arguments ------------------------------------------------------------------

PASSTHROUGH: dict[str, Any] = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}


def passthrough(group: click.Group, name: str, module: str, summary: str) -> None:
    """`name ARGS...` runs `module.main(ARGS)`, which parses them (`name --help` prints its options)."""

    @group.command(name, context_settings=PASSTHROUGH, help=summary, short_help=summary)
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def command(args: tuple[str, ...]) -> None:
        sys.exit(importlib.import_module(module).main(list(args)))


@cli.group()
def audit() -> None:
    """The audit at scale, incremental, and against DuckDB (needs Java for Spark)."""


passthrough(audit, "scale", "bench.suites.audit_scale", "audit events/s at 1M and 10M events, against an anchor")
passthrough(audit, "incremental", "bench.suites.audit_incremental", "an incremental audit against the new events alone")
passthrough(audit, "engines", "bench.suites.audit_engines", "the audit's state pass on Spark against DuckDB")
passthrough(
    cli, "soak", "bench.suites.soak", "steady writes for a bounded time; fails if disk, RSS or descriptors grow"
)
passthrough(cli, "sim-sweep", "bench.suites.sim_sweep", "many random fault schedules on the simulator, in parallel")
passthrough(cli, "state-size", "bench.suites.state_size", "write latency against the state's size, against etcd")
passthrough(cli, "transport-send", "bench.suites.transport_send", "the peer transport against raw sockets")
passthrough(cli, "client-overhead", "bench.suites.client_overhead", "the client library against a raw HTTP request")
passthrough(cli, "profile", "bench.suites.profile", "where a write's time goes in the sidecar (py-spy)")


def main() -> None:
    cli(prog_name="python -m bench")
