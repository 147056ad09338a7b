"""Tables and ratios from a results file (bench/harness/results.py): the tables a suite prints after its run,
and docs/performance.md, which `python -m bench report RESULTS` renders from one run's file, so that the page
always agrees with one run. Ratios are ours / the peer's, medians over the run's interleaved rounds."""

from __future__ import annotations

import statistics
from typing import Any

from bench.harness.etcd_check import banner
from bench.harness.machine import HOG
from bench.harness.measure import CLIENT_TIMEOUT_S
from bench.harness.systems import percentile

OURS, ETCD, PSO = "coordinated 3n", "etcd 3n", "PySyncObj 3n"
REPRODUCE = "make bench"
RESULTS = "bench-results.json"  # where `make bench` writes a run
PUBLISHED = "docs/performance.json"  # the run docs/performance.md is rendered from


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def spread(values: list[float], digits: int = 1) -> str:
    if not values:
        return "n/a"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{med(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def ratio(mine: float, theirs: float) -> str:
    return f"{mine / theirs:.2f}x" if theirs and theirs == theirs and mine == mine else "n/a"


def perf_table(results: dict[str, Any]) -> list[str]:
    rows = [
        "| system | seq p50 ms | seq p99 ms | 1 client w/s | 16 clients w/s | 64 clients w/s | idle RSS MB/node |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, r in results.items():
        if "seq_p50" not in r:
            continue
        rows.append(
            f"| {label} | {spread(r['seq_p50'])} | {spread(r['seq_p99'])} | {spread(r['tput_1'], 0)} | "
            f"{spread(r['tput_16'], 0)} | {spread(r['tput_64'], 0)} | {spread(r['rss_mb'])} |"
        )
    return rows


def fault_table(results: dict[str, Any]) -> list[str]:
    rows = [
        "| system | fault | trials | window p50 ms | window max ms | new leader seen p50 ms | detection settings |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, r in results.items():
        for fault, name in (("kill9", "kill -9 leader"), ("sigstop", "SIGSTOP leader")):
            windows = r.get(f"{fault}_window", [])
            if not windows and not r.get(f"{fault}_failed"):
                continue
            failed = len(r.get(f"{fault}_failed", []))
            trials = f"{len(windows)}" + (f" (+{failed} failed)" if failed else "")
            rows.append(
                f"| {label} | {name} | {trials} | {percentile(windows, 50):.0f} | "
                f"{max(windows, default=float('nan')):.0f} | {percentile(r.get(f'{fault}_observed', []), 50):.0f} | "
                f"{r.get('detection', [''])[0]} |"
            )
    return rows


def cpu_values(r: dict[str, Any], phase: str, key: str) -> list[float]:
    return [cpu[phase][key] for cpu in r.get("cpu", []) if phase in cpu]


def with_cpu(r: dict[str, Any]) -> dict[str, Any]:
    """The figures of one system plus its CPU per write (ms) at 1 and 64 clients, as lists over rounds."""
    return {**r, "cpu_1": cpu_values(r, "tput_1", "system_ms"), "cpu_64": cpu_values(r, "tput_64", "system_ms")}


def conditions_table(results: dict[str, Any]) -> list[str]:
    """Per system phase: the machine before and after it, the other processes' CPU during it, and CPU/write."""
    rows = [
        "| phase | fsync p50 ms before / after | fsync p99 ms before / after | load1 before / after | "
        "CPU pressure % before / after | other processes' cores, seq / 64 clients | "
        "CPU ms/write at 1 client: system + harness | at 64 clients: system + harness |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, r in results.items():
        if not r.get("conditions"):
            continue
        conds = r["conditions"]

        def both(key: str, digits: int, conds: list[Any] = conds) -> str:
            before = spread([c["before"][key] for c in conds], digits)
            after = spread([c["after"][key] for c in conds], digits)
            return f"{before} / {after}"

        rows.append(
            f"| {label} | {both('fsync_p50', 2)} | {both('fsync_p99', 1)} | {both('load1', 1)} | "
            f"{both('cpu_pressure', 0)} | {spread(cpu_values(r, 'seq', 'others_cores'))} / "
            f"{spread(cpu_values(r, 'tput_64', 'others_cores'))} | {spread(cpu_values(r, 'tput_1', 'system_ms'), 2)} + "
            f"{spread(cpu_values(r, 'tput_1', 'harness_ms'), 2)} | {spread(cpu_values(r, 'tput_64', 'system_ms'), 2)} + "
            f"{spread(cpu_values(r, 'tput_64', 'harness_ms'), 2)} |"
        )
    return rows


def ratio_rows(results: dict[str, Any], suffix: str = "") -> list[str]:
    """ours / peer for each figure; for latency and failover lower is better, for throughput higher.
    `suffix` selects the phases measured with the CPU hog (" +hog")."""
    figures = [
        ("seq p50 latency", "seq_p50", "lower", "<= 1.2x etcd"),
        ("seq p99 latency", "seq_p99", "lower", ""),
        ("throughput, 1 client", "tput_1", "higher", ""),
        ("throughput, 16 clients", "tput_16", "higher", ""),
        ("throughput, 64 clients", "tput_64", "higher", ">= 1.0x etcd"),
        ("kill -9 failover window p50", "kill9_window", "lower", "<= 0.1x etcd"),
        ("idle RSS", "rss_mb", "lower", ""),
        ("CPU per write, 1 client", "cpu_1", "lower", ""),
        ("CPU per write, 64 clients", "cpu_64", "lower", ""),
    ]
    rows = [
        "| figure (3 nodes) | ours / etcd | ours / PySyncObj | ours / PySyncObj no-batch | better is | goal |",
        "|---|---|---|---|---|---|",
    ]
    table = {label: with_cpu(results.get(label + suffix, {})) for label in (OURS, ETCD, PSO, PSO + " no-batch")}
    ours = table[OURS]
    for name, key, better, goal in figures:
        if suffix and key in ("kill9_window", "rss_mb"):
            continue  # failover and idle RSS are measured quiet only
        cells = []
        for peer in (ETCD, PSO, PSO + " no-batch"):
            mine, theirs = med(ours.get(key, [])), med(table.get(peer, {}).get(key, []))
            cells.append(ratio(mine, theirs))
        rows.append(f"| {name} | {' | '.join(cells)} | {better} | {goal} |")
    ours5, etcd5 = with_cpu(results.get("coordinated 5n" + suffix, {})), results.get("etcd 5n" + suffix, {})
    for name, key, better, goal in (
        ("5 nodes: seq p50 latency", "seq_p50", "lower", "<= 1.5x etcd"),
        ("5 nodes: throughput, 64 clients", "tput_64", "higher", ""),
    ):
        mine, theirs = med(ours5.get(key, [])), med(etcd5.get(key, []))
        rows.append(f"| {name} | {ratio(mine, theirs)} (etcd 5n) | n/a | n/a | {better} | {goal} |")
    return rows


def peers_text(section: dict[str, Any]) -> str:
    """What `peers` prints after its run: the figures, the machine around each phase, the ratios."""
    results = section["results"]
    hog = any(label.endswith(HOG) for label in results)
    lines = [
        *banner(section["etcd_check"]),
        "",
        "Latency, throughput, memory (median (min-max) over the rounds):",
        *perf_table(results),
        "",
        "The machine around each phase:",
        *conditions_table(results),
        "",
        "Ratios (medians)" + (", quiet:" if hog else ":"),
        *ratio_rows(results),
    ]
    if hog:
        lines += ["", "Ratios (medians), with a busy loop on one core:", *ratio_rows(results, HOG)]
    return "\n".join(lines)


HOT_KEY_FIGURES = (
    ("16 clients on 1 key", "hot_16_on_1"),
    ("16 clients on their own keys", "tput_16"),
    ("64 clients on 16 keys", "hot_64_on_16"),
    ("64 clients on their own keys", "tput_64"),
)


def hot_keys_text(section: dict[str, Any]) -> str:
    """What `hot-keys` prints after its run: writes/s per point (median (min-max) over the rounds), and each
    system's ratio to etcd's median."""
    results = section["results"]
    etcd = results.get("etcd 3n", {})
    labels = [label for label in results if any(figure in results[label] for _, figure in HOT_KEY_FIGURES)]
    lines = [
        *banner(section["etcd_check"]),
        "",
        "Hot keys, writes/s (median (min-max) over the rounds), and the ratio to etcd 3n's median:",
        "| point | " + " | ".join(labels) + " |",
        "|---|" + "---|" * len(labels),
    ]
    for name, figure in HOT_KEY_FIGURES:
        cells = []
        for label in labels:
            values = results[label].get(figure, [])
            against = (
                f" **{ratio(med(values), med(etcd[figure]))}**"
                if etcd.get(figure) and values and label != "etcd 3n"
                else ""
            )
            cells.append(spread(values, 0) + against)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def failover_text(section: dict[str, Any]) -> str:
    title = f"Failover (one sequential writer, client timeout {CLIENT_TIMEOUT_S:.0f} s, rotating over the others):"
    return "\n".join([title, *fault_table(section["results"])])


# -- docs/performance.md ------------------------------------------------------------------------------------

WRITE_FIGURES = (
    ("sequential write, p50", "seq_p50", "ms", "lower"),
    ("sequential write, p99", "seq_p99", "ms", "lower"),
    ("throughput, 1 client", "tput_1", "writes/s", "higher"),
    ("throughput, 16 clients", "tput_16", "writes/s", "higher"),
    ("throughput, 64 clients", "tput_64", "writes/s", "higher"),
)
FANOUT_FIGURES = (
    ("delivery to every watcher, p50", "deliver_p50_ms", "ms"),
    ("delivery to every watcher, p99", "deliver_p99_ms", "ms"),
    ("master's CPU per write", "master_cpu_ms_per_write", "ms"),
    ("write latency with the watchers, p50", "commit_p50_ms", "ms"),
)


def _figure(value: float, unit: str) -> str:
    return f"{value:,.0f} {unit}" if unit == "writes/s" else f"{value:.2f} {unit}"


def writes_section(peers: dict[str, Any]) -> list[str]:
    results = peers["results"]
    sizes = [n for n in (3, 5) if f"coordinated {n}n" in results and f"etcd {n}n" in results]
    if not sizes:
        return []
    options = peers["options"]
    lines = [
        "## Writes",
        "",
        f"One-key writes of fresh values, through the master for the sequential writer and spread over every node "
        f"for N concurrent clients. Median of {options['rounds']} interleaved round(s) ({options['writes']} "
        f"sequential writes and {options['seconds']:.0f} s per throughput point each).",
        "",
        "| figure | better is | " + " | ".join(f"{n} nodes: ours / etcd" for n in sizes) + " |",
        "|---|---|" + "---|" * len(sizes),
    ]
    for name, key, unit, better in WRITE_FIGURES:
        cells = []
        for n in sizes:
            mine, theirs = med(results[f"coordinated {n}n"][key]), med(results[f"etcd {n}n"][key])
            cells.append(f"**{ratio(mine, theirs)}** ({_figure(mine, unit)} / {_figure(theirs, unit)})")
        lines.append(f"| {name} | {better} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def fanout_section(fanout: dict[str, Any]) -> list[str]:
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in fanout["rows"]:
        if "failed" not in row:
            groups.setdefault((row["system"], row["watchers"]), []).append(row)
    lines: list[str] = []
    for watchers in sorted({w for _, w in groups}):
        ours, etcd, floor = (groups.get((system, watchers)) for system in ("coordinated", "etcd", "floor"))
        if not ours or not etcd:
            continue
        if not lines:
            lines = [
                "## Watch fan-out",
                "",
                "Watchers on one prefix, spread over the 3 nodes (etcd: one gRPC Watch stream each, on a connection "
                "of its own, as watchers in their own pods would have); one writer, one key at a time, the next "
                "when every watcher has the last. The floor is a bare HTTP server in Python that writes each "
                "change to its held responses, with no replication: what any HTTP fan-out costs here. Lower is "
                "better for every figure.",
                "",
            ]
        lines += [
            f"| {watchers} watchers | ours / etcd | the floor / etcd |",
            "|---|---|---|",
        ]
        for name, key, unit in FANOUT_FIGURES:
            mine = med([row["watchers_phase"][key] for row in ours])
            theirs = med([row["watchers_phase"][key] for row in etcd])
            lowest = med([row["watchers_phase"][key] for row in floor]) if floor else float("nan")
            cells = f"**{ratio(mine, theirs)}** ({_figure(mine, unit)} / {_figure(theirs, unit)})"
            lines.append(f"| {name} | {cells} | {ratio(lowest, theirs)} |")
        lines.append("")
    return lines


def history_section(history: dict[str, Any]) -> list[str]:
    payload = history["payload_bytes"]
    lines = [
        "## History bytes per write",
        "",
        "Every node keeps a history of what it accepted, committed and applied, for the audit. Per one-key write "
        f"of a small value ({payload:.0f} bytes of key and value, the floor), on each node "
        f"({history['options']['nodes']} nodes, {history['options']['writes']:,} writes); archived is what an "
        "archive keeps, and what the disk holds in the long run.",
        "",
        "| clients | on disk per node | archived per node | archived / payload |",
        "|---|---|---|---|",
    ]
    for row in history["rows"]:
        if row["tree"] != "this tree":
            continue
        lines.append(
            f"| {row['clients']} | {row['on_disk_mean']:.0f} bytes | {row['archived_mean']:.0f} bytes | "
            f"{row['archived_mean'] / payload:.1f}x |"
        )
    return [*lines, ""]


def conditions_lines(run: dict[str, Any]) -> list[str]:
    """The machine and its load during the run, from what each suite recorded around its phases."""
    machine = run["machine"]
    conds: list[dict[str, float]] = []
    suites = run["suites"]
    for figures in suites.get("peers", {}).get("results", {}).values():
        for phase in figures.get("conditions", []):
            conds += [phase["before"], phase["after"]]
    conds += [row["conditions"] for row in suites.get("watch-fanout", {}).get("rows", [])]
    versions = machine["versions"]
    lines = [
        "## On what",
        "",
        f"- {machine['cpus']} vCPU ({machine['cpu_model']}), {machine['memory_gib']} GiB of memory, Linux "
        f"{machine['kernel']}; data dirs in {machine['data_dirs']}. Clients, servers and peers share these CPUs.",
        f"- coordinated-cluster {versions['coordinated-cluster']}, etcd {versions['etcd']} (Debian's etcd-server, "
        f"driven with gRPC), Python {versions['python']}, aiohttp {versions['aiohttp']}, grpcio {versions['grpcio']}.",
    ]
    if conds:
        loads = [c["load1"] for c in conds]
        fsyncs = [c["fsync_p50"] for c in conds]
        lines.append(
            f"- The machine was shared: load average {min(loads):.1f} to {max(loads):.1f} around the phases; "
            f"a 4 KiB write + fdatasync took {min(fsyncs):.2f} to {max(fsyncs):.2f} ms (p50). Both systems ran "
            "in turns within each round, so the load fell on both: compare the ratios, not the absolute figures."
        )
    check = suites.get("peers", {}).get("etcd_check")
    if check is not None:
        lines.append(
            "- " + " ".join(banner(check))
            if check["flagged"]
            else "- etcd was as fast in this run as it is known to be on this kind of machine, so the ratios do "
            "not flatter us (the check is in docs/benchmarking.md)."
        )
    return [*lines, ""]


def performance_page(run: dict[str, Any]) -> str:
    """docs/performance.md from one run's results: what to expect against etcd, on what, how to reproduce."""
    suites = run["suites"]
    lines = [
        "# Performance",
        "",
        f"<!-- Generated by `python -m bench report {PUBLISHED} > docs/performance.md`: do not edit by hand. -->",
        "",
        "What to expect from coordinated-cluster against etcd, measured side by side on one machine, in one run "
        f"({run['started']}), with the same client harness for both. Each figure is a ratio, ours / etcd's, with "
        "both values in brackets. How the comparison is kept fair, and why ratios: "
        "[benchmarking.md](benchmarking.md).",
        "",
    ]
    if "peers" in suites:
        lines += writes_section(suites["peers"])
    if "watch-fanout" in suites:
        lines += fanout_section(suites["watch-fanout"])
    if "history-bytes" in suites:
        lines += history_section(suites["history-bytes"])
    lines += conditions_lines(run)
    lines += [
        "## Reproduce",
        "",
        "```sh",
        f"{REPRODUCE}                                  # installs what it needs, runs the suites, writes {RESULTS}",
        f".venv/bin/python -m bench report {RESULTS}   # this page, from your run",
        "```",
        "",
        "`python -m bench --help` lists the other suites (failover, the audit, soak, the simulator, ...).",
        "",
    ]
    return "\n".join(lines)
