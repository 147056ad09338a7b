"""`python -m bench SUITE ...`: one entry point, a subcommand per suite, as etcd's tools/benchmark has.

Each suite runs its systems in interleaved rounds on this machine, prints its figures and, with `--out FILE`,
adds its section to a results file (bench/harness/results.py). `headline` runs the suites that
docs/performance.md is made of into one file; `report` renders that page from it. Every suite's options are
click options here (`python -m bench SUITE --help`). Suites import their systems' libraries (grpc, pysyncobj) only
when they run, so `report` works without the `[bench]` extra.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
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


@cli.command("hot-keys")
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True, help="interleaved rounds")
@click.option("--seconds", type=click.FloatRange(min=0.5), default=5.0, show_default=True, help="per point")
@click.option("--systems", default="coordinated 3n,etcd 3n", show_default=True, help="comma-separated labels")
@click.option(
    "--ab-tree", multiple=True, metavar="REV", help="also run 'coordinated 3n [REV]', git revision REV (repeatable)"
)
@WORKDIR
@OUT
def hot_keys(out: Path | None, ab_tree: tuple[str, ...], **given: Any) -> None:
    """Throughput of 16 clients on 1 key and 64 clients on 16 keys, against etcd (and their own keys)."""
    from bench.suites import hot_keys as suite

    options = suite.HotKeysOptions(ab_tree=list(ab_tree), **given)
    section = suite.run(options)
    click.echo(reports.hot_keys_text(section))
    save(out, "hot-keys", section, options.workdir)


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


@cli.command("prefix-delete")
@click.option("--keys", type=click.IntRange(min=1), default=100_000, show_default=True)
@click.option("--baseline", default=None, help="another source tree measured in the same run")
@OUT
def prefix_delete(out: Path | None, keys: int, baseline: str | None) -> None:
    """How long a write waits behind a prefix delete of KEYS keys, against the median write (the floor)."""
    from bench.suites import prefix_delete as suite

    save(out, "prefix-delete", suite.run(keys, baseline))


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


def pairs(_ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """Repeated `NAME=VALUE` options as (name, value) pairs; a value without `=` is a usage error naming it."""
    found = []
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"[{value}] must be NAME=VALUE", param=param)
        found.append((name, rest))
    return tuple(found)


@cli.command()
@click.option("--clients", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--seconds", type=click.FloatRange(min=0.5), default=10.0, show_default=True)
@click.option("--top", type=click.IntRange(min=1), default=28, show_default=True, help="frames listed per table")
@click.option("--set", "settings", multiple=True, callback=pairs, metavar="SETTING=VALUE", help="a node setting")
@click.option(
    "--sampler",
    type=click.Choice(["py-spy", "cpu-time"]),
    default="py-spy",
    show_default=True,
    help="py-spy: wall clock and CPU as py-spy sees it; cpu-time: SIGPROF per slice of CPU time",
)
def profile(clients: int, seconds: float, top: int, settings: tuple[tuple[str, str], ...], sampler: str) -> None:
    """Where a write's time goes in the sidecar: py-spy on the master and a follower while clients write."""
    from bench.suites import profile as suite

    suite.main(clients, seconds, top, dict(settings), sampler)


@cli.command("sim-sweep")
@click.option("--schedules", type=click.IntRange(min=1), default=1000, show_default=True)
@click.option("--first-seed", type=click.IntRange(min=0), default=1_000_000, show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True)
def sim_sweep(schedules: int, first_seed: int, workers: int) -> None:
    """Many random fault schedules on the simulator, in parallel; fails if any schedule failed."""
    from bench.suites import sim_sweep as suite

    sys.exit(1 if suite.main(schedules, first_seed, workers) else 0)


@cli.command("state-size")
@click.option("--source", multiple=True, callback=pairs, metavar="NAME=DIR", help="another source tree (repeatable)")
@click.option("--writes", type=click.IntRange(min=1), default=200, show_default=True, help="one-key writes per state")
@click.option("--seconds", type=click.FloatRange(min=0.5), default=5.0, show_default=True, help="16-client phase")
@click.option("--clients", type=click.IntRange(min=1), default=16, show_default=True)
@click.option("--only", multiple=True, metavar="STATE", help="only this state, e.g. '10 MB' (repeatable)")
@click.option("--etcd/--no-etcd", default=True, show_default=True, help="etcd at 100,000 keys")
def state_size(
    source: tuple[tuple[str, str], ...], writes: int, seconds: float, clients: int, only: tuple[str, ...], etcd: bool
) -> None:
    """Write latency and RSS against the state's size, 10 keys to 10 MB, against etcd at 100,000 keys."""
    from bench.suites import state_size as suite

    unknown = sorted(set(only) - set(suite.SIZES))
    if unknown:
        raise click.BadParameter(f"{unknown} are not among {list(suite.SIZES)}", param_hint="--only")
    suite.main([(name, Path(tree)) for name, tree in source], writes, seconds, clients, only, etcd)


@cli.command("transport-send")
@click.option("--destinations", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--per-turn", type=click.IntRange(min=1), default=1, show_default=True, help="messages per round each")
@click.option("--rounds", type=click.IntRange(min=1), default=5000, show_default=True)
@click.option("--runs", type=click.IntRange(min=1), default=3, show_default=True)
@click.option(
    "--source",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="measure the transport of this source tree instead",
)
@click.option("--child", type=click.Choice(["transport", "anchor"]), default=None, hidden=True)
def transport_send(
    destinations: int, per_turn: int, rounds: int, runs: int, source: Path | None, child: str | None
) -> None:
    """The peer transport's CPU per message against asyncio streams on raw sockets, in the same run."""
    from bench.suites import transport_send as suite

    if child is not None:  # one way's rounds, in the process the suite started for it
        suite.child(child, destinations, per_turn, rounds)
    else:
        suite.main(destinations, per_turn, rounds, runs, source)


@cli.command("client-overhead")
@click.option("--writes", type=click.IntRange(min=1), default=400, show_default=True, help="per driver and round")
@click.option("--rounds", type=click.IntRange(min=1), default=5, show_default=True)
def client_overhead(writes: int, rounds: int) -> None:
    """The client library's sequential write latency against a raw HTTP request to the same node."""
    from bench.suites import client_overhead as suite

    suite.main(writes, rounds)


@cli.command("cli-startup")
@click.option("--runs", type=click.IntRange(min=1), default=20, show_default=True, help="of each command")
def cli_startup(runs: int) -> None:
    """`coordinated kv get` as a whole command, start-up included, against `etcdctl get` in the same run."""
    from bench.suites import cli_startup as suite

    suite.main(runs)


@cli.group()
def audit() -> None:
    """The audit at scale, incremental, and against DuckDB (needs Java for Spark)."""


@audit.command()
@click.option(
    "--input",
    "input_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="a folder of compacted Parquet histories (as `--compact-to` writes)",
)
@click.option("--events", type=click.IntRange(min=1), default=None, help="generate this many events (with --workdir)")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=None, help="for --events")
@click.option("--master", default="local[2]", show_default=True, help="Spark's; DuckDB gets as many threads")
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True, help="runs per engine")
@click.option("--driver-memory", default="2g", show_default=True, help="spark.driver.memory")
@click.option(
    "--source",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="run Spark's side with another source tree's audit (an A/B)",
)
@click.option("--timeout", type=click.FloatRange(min=1), default=1800.0, show_default=True, help="seconds per child")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="figures")
@click.option("--child", type=click.Choice(["spark", "duckdb"]), default=None, hidden=True)
def engines(input_dir: Path | None, json_out: Path | None, child: str | None, **given: Any) -> None:
    """The audit's state pass on Spark against DuckDB on the same Parquet files."""
    from bench.suites import audit_engines as suite

    options = suite.EnginesOptions(input=input_dir, json=json_out, **given)
    if child is not None:  # one engine's rounds, in the process the suite started for it
        if input_dir is None:
            raise click.UsageError("--child needs --input")
        suite.child(child, input_dir, options.master, options.rounds, options.driver_memory)
        return
    problem = options.problem()
    if problem is not None:
        raise click.UsageError(problem)
    suite.main(options)


@audit.command()
@click.option(
    "--events", type=click.IntRange(min=1), multiple=True, help="events per history (repeatable) [default: 1M, 10M]"
)
@click.option("--master", default="local[2]", show_default=True)
@click.option(
    "--driver-memory", default="1g", show_default=True, help="spark.driver.memory (local mode: the whole JVM)"
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="keep the generated histories here and reuse them in later runs (default: a temporary folder, removed after)",
)
@click.option("--seed", type=int, default=42, show_default=True)
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="figures")
@click.option("--forms", type=click.Choice(["jsonl", "parquet"]), multiple=True, help="(repeatable) [default: both]")
@click.option(
    "--fast-compact", is_flag=True, help="make the Parquet form with Spark's plain JSON reader instead of --compact-to"
)
@click.option("--prepare-only", is_flag=True, help="only generate (and compact) the histories")
@click.option(
    "--event-log",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    metavar="DIR",
    help="write the audit's and the anchor's Spark event logs under DIR; report job counts and executor CPU-seconds",
)
@click.option(
    "--conf",
    multiple=True,
    callback=pairs,
    metavar="KEY=VALUE",
    help="a Spark setting for both the audit and the anchor (repeatable), e.g. for an A/B of JVM options",
)
def scale(events: tuple[int, ...], forms: tuple[str, ...], json_out: Path | None, **given: Any) -> None:
    """Audit events/s at 1M and 10M events, against an anchor (the least Spark job over the same events)."""
    from bench.suites import audit_scale as suite

    defaults = suite.ScaleOptions()
    suite.main(
        suite.ScaleOptions(events=events or defaults.events, forms=forms or defaults.forms, json=json_out, **given)
    )


@audit.command()
@click.option("--old", type=click.IntRange(min=1), multiple=True, help="old events (repeatable) [default: 1M, 10M]")
@click.option("--new", type=click.IntRange(min=1), default=1_000_000, show_default=True, help="new events")
@click.option("--master", default="local[2]", show_default=True)
@click.option("--layout", type=click.Choice(["zst", "jsonl"]), default="zst", show_default=True)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(tempfile.gettempdir()) / "audit-incremental",
    show_default=True,
    help="generated histories are kept here and reused",
)
@click.option(
    "--audit-option", "audit_options", multiple=True, metavar="OPTION", help="passed to every audit (repeatable)"
)
def incremental(
    old: tuple[int, ...], new: int, master: str, layout: str, workdir: Path, audit_options: tuple[str, ...]
) -> None:
    """An incremental audit against the new events alone: 1M new events on top of 1M and of 10M old ones."""
    from bench.suites import audit_incremental as suite

    suite.main(old or (1_000_000, 10_000_000), new, master, layout, workdir, audit_options)


@cli.command()
@click.option("--minutes", type=click.FloatRange(min=0, min_open=True), required=True, help="how long to write")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), default=50.0, show_default=True, help="writes/s")
@click.option(
    "--sample-s", type=click.FloatRange(min=1), default=60.0, show_default=True, help="seconds between samples"
)
@click.option(
    "--audit-every",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="minutes between incremental audits, 0 for the end's only (at 50 writes/s a run reads about 270,000 new "
    "events, which fits local[1])",
)
@click.option("--driver-memory", default="2g", show_default=True, help="each audit's spark.driver.memory")
@click.option(
    "--audit-timeout-min", type=click.FloatRange(min=1), default=60.0, show_default=True, help="per audit attempt"
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="where the chart, samples and reports go",
)
def soak(**given: Any) -> None:
    """Steady writes for a bounded time with an archive and incremental audits; fails if disk, RSS or descriptors
    grow, an audit finds a violation or does not complete, or anything written is lost."""
    from bench.suites import soak as suite

    sys.exit(suite.main(suite.SoakOptions(**given)))


def main() -> None:
    cli(prog_name="python -m bench")
