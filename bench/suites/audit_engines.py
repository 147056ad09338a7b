"""The audit's state pass on Spark against the same pass on DuckDB: one Parquet input, one run.

    .venv/bin/python -m bench audit engines --input /tmp/audit-speed-data/pq10000000
    .venv/bin/python -m bench audit engines --events 1000000 --workdir /tmp/audit-speed-data

The state pass is the audit's largest: one scan of the events into a hash aggregation per state
(`coordinated.audit.prepare.state_table`). DuckDB runs the same aggregation, written in SQL below, on the
same files with as many threads as Spark has cores. Each engine runs in a child process of its own,
`--rounds` times in one session: the first round pays Spark's start-up compilation, the later rounds are
warm. Per round it prints the wall time and the CPU time of the child's process tree (the JVM included).

Both engines reduce their table to one summary: the number of states, sums and bitwise xors of the numeric
columns, and counts of the conditions the audit's checks test on the hashed ones (hashes differ between
the engines; equal and unequal hashes do not). The run fails if the two summaries differ, so both did the
same work. The Spark side is the audit's own code; `--source DIR` measures another tree's.

With `--events N` the input is generated and compacted by `python -m bench audit scale --prepare-only` (reused
from `--workdir` when already there). Figures only: nothing here asserts on timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness.machine import harness_cpu_s, process_cpu_s
from bench.harness.procs import bench_env, module_command
from bench.harness.systems import tree_pythonpath
from bench.suites.audit_scale import _children

# The summary both engines compute over their state table. Every column of the table takes part, so Spark
# computes every aggregate of the pass (it prunes those nobody reads).
SUMMARY: dict[str, str] = {
    "states": "count(*)",
    "term_sum": "sum(term)",
    "version_sum": "sum(version)",
    "accepted": "sum(accepted)",
    "conflicts": "count_if(conflict)",
    "with_parent": "count(parent_h)",
    "masters_differ": "count_if(master_min_h != master_max_h)",
    "master_missing": "count_if(master_missing)",
    "accepted_configs_differ": "count_if(acc_cfg_min != acc_cfg_max)",
    "commit_config_differs": "count_if(NOT (acc_cfg_min <=> commit_cfg))",
    "committed": "count_if(committed)",
    "reset_roots": "count_if(reset_root)",
    "rewritten": "count_if(rewritten)",
    "committed_anywhere": "count_if(committed_anywhere)",
    "applied": "count_if(applied)",
    "acc_mask_xor": "bit_xor(acc_mask)",
    "quorum_mask_xor": "bit_xor(quorum_mask)",
    "quorum_odd": "count_if(quorum_odd)",
    "quorum_ok": "count_if(quorum_ok)",
    "first_accepted_timed": "count(first_accepted_ts)",
    "last_commit_ts": "max(commit_ts)",
}

# `state_table` in DuckDB's SQL, column for column. `members` keeps the order in which an event lists its
# configurations' members (first occurrence), as Spark's `array_union` does: a member's position is its bit.
DUCKDB_STATE_TABLE = """
WITH rows AS (
  SELECT *, type = 'accepted' AS acc, (type = 'committed' AND node = master) AS mcommit,
    (type = 'accepted' OR last_committed_config IS DISTINCT FROM last_accepted_config) AS pre,
    list_concat(coalesce(last_committed_config, []::VARCHAR[]), coalesce(last_accepted_config, []::VARCHAR[]))
      AS both_configs
  FROM read_parquet('{files}', union_by_name = true, hive_partitioning = false)
  WHERE type IN ('accepted', 'committed', 'applied', 'unsafe_bootstrap', 'settings_removed')
    AND cluster_uuid IS NOT NULL AND node IS NOT NULL AND seq IS NOT NULL AND term IS NOT NULL
    AND version IS NOT NULL AND state_uuid IS NOT NULL
), members AS (
  SELECT *, CASE WHEN acc OR mcommit THEN list_filter(both_configs, lambda x, i: list_position(both_configs, x) = i)
    END AS members
  FROM rows
), ev AS (
  SELECT cluster_uuid AS cid, state_uuid, term, version, ts, acc, mcommit, pre,
    type = 'unsafe_bootstrap' AS reset, type = 'settings_removed' AS rewritten, type = 'applied' AS app,
    type = 'committed' AS comm,
    hash(term, version, parent_uuid, master, last_accepted_config) AS content,
    CASE WHEN parent_uuid IS NOT NULL THEN hash(parent_uuid) END AS parent_h,
    CASE WHEN master IS NOT NULL THEN hash(master) END AS master_h,
    CASE WHEN pre OR mcommit THEN hash(last_committed_config, last_accepted_config) END AS cfg,
    CASE WHEN acc THEN bit_of(coalesce(list_position(members, node), 0)) END AS acc_bit,
    CASE WHEN mcommit THEN coalesce(list_aggregate(list_transform(coalesce(quorum, []::VARCHAR[]),
      lambda x: bit_of(coalesce(list_position(members, x), 0))), 'bit_or'), 0) END AS q_mask,
    CASE WHEN mcommit THEN len(members) > 63 OR coalesce(list_bool_or(list_transform(coalesce(quorum, []::VARCHAR[]),
      lambda x: coalesce(list_position(members, x), 0) = 0)), false) END AS q_odd,
    CASE WHEN mcommit THEN majority(quorum, last_committed_config) AND majority(quorum, last_accepted_config)
      END AS q_ok
  FROM members
)
SELECT cid, state_uuid, min(term) AS term, min(version) AS version,
  (min(content) != max(content)) OR (min(CASE WHEN pre THEN cfg END) != max(CASE WHEN pre THEN cfg END)) AS conflict,
  coalesce(min(CASE WHEN mcommit THEN parent_h END), min(parent_h)) AS parent_h,
  min(master_h) AS master_min_h, max(master_h) AS master_max_h, bool_or(master_h IS NULL) AS master_missing,
  sum(acc::INTEGER) AS accepted,
  min(CASE WHEN acc THEN cfg END) AS acc_cfg_min, max(CASE WHEN acc THEN cfg END) AS acc_cfg_max,
  min(CASE WHEN mcommit THEN cfg END) AS commit_cfg,
  bool_or(mcommit) OR bool_or(reset) AS committed, bool_or(reset) AND NOT coalesce(bool_or(mcommit), false) AS reset_root,
  bool_or(rewritten) AS rewritten,
  bool_or(comm) AS committed_anywhere, bool_or(app) AS applied,
  bit_or(acc_bit) AS acc_mask, bit_or(q_mask) AS quorum_mask, bool_or(q_odd) AS quorum_odd, bool_and(q_ok) AS quorum_ok,
  min(CASE WHEN acc THEN ts END) AS first_accepted_ts, min(CASE WHEN mcommit THEN ts END) AS commit_ts
FROM ev GROUP BY cid, state_uuid
"""

DUCKDB_MACROS = (
    # Spark's `_bit`: members beyond the 63rd have no bit (the audit checks those with the strings).
    "CREATE MACRO bit_of(position) AS CASE WHEN position > 0 AND position <= 63 THEN 1::BIGINT << (position - 1) "
    "ELSE 0::BIGINT END",
    # `majority_of`: the configuration's distinct members that are in the quorum are more than half of them.
    "CREATE MACRO majority(q, config) AS coalesce(len(list_filter(list_distinct(coalesce(config, []::VARCHAR[])), "
    "lambda m: list_contains(q, m))) * 2 > len(list_distinct(coalesce(config, []::VARCHAR[]))), false)",
)


def tree_cpu_s() -> float:
    """utime + stime of this process and its children (in local mode the JVM runs every Spark task).
    This process's own time comes from getrusage, exact to the microsecond: DuckDB runs here, and a round over a
    small input can take less than the 10 ms tick that /proc's per-process figures count in."""
    return harness_cpu_s() + sum(process_cpu_s(pid) for pid in _children(os.getpid()))


def timed_rounds(rounds: int, one: Callable[[], dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for number in range(1, rounds + 1):
        cpu, start = tree_cpu_s(), time.monotonic()
        summary = one()
        yield {"round": number, "wall_s": time.monotonic() - start, "cpu_s": tree_cpu_s() - cpu, "summary": summary}


def spark_rounds(path: str, master: str, rounds: int, driver_memory: str) -> Iterator[dict[str, Any]]:
    from pyspark.sql import functions as F

    from coordinated.audit.prepare import state_table
    from coordinated.audit.reading import read_parquet
    from coordinated.audit.session import build_session

    spark = build_session(master, {"spark.ui.showConsoleProgress": "false", "spark.driver.memory": driver_memory})
    try:

        def one() -> dict[str, Any]:
            table = state_table(read_parquet(spark, [path], skip_malformed=False).events)
            row = table.agg(*(F.expr(sql).alias(name) for name, sql in SUMMARY.items())).collect()[0]
            return row.asDict()

        yield from timed_rounds(rounds, one)
    finally:
        spark.stop()


def duckdb_connection(threads: int | None = None) -> Any:
    """A DuckDB connection with the state table's macros (and `threads` threads, else DuckDB's default)."""
    import duckdb

    connection = duckdb.connect()
    if threads is not None:
        connection.execute(f"SET threads = {threads}")
    for macro in DUCKDB_MACROS:
        connection.execute(macro)
    return connection


def duckdb_state_table(path: str) -> str:
    """`DUCKDB_STATE_TABLE` over the Parquet files under `path`."""
    return DUCKDB_STATE_TABLE.format(files=f"{path.rstrip('/')}/**/*.parquet")


def duckdb_rows(connection: Any, query: str) -> list[dict[str, Any]]:
    result = connection.execute(query)
    names = [d[0] for d in result.description]
    return [dict(zip(names, row, strict=True)) for row in result.fetchall()]


def duckdb_rounds(path: str, threads: int, rounds: int) -> Iterator[dict[str, Any]]:
    connection = duckdb_connection(threads)
    columns = ", ".join(f"{sql} AS {name}" for name, sql in SUMMARY.items()).replace("<=>", "IS NOT DISTINCT FROM")
    query = f"SELECT {columns} FROM ({duckdb_state_table(path)})"
    yield from timed_rounds(rounds, lambda: duckdb_rows(connection, query)[0])


def cores_of(master: str) -> int:
    """The cores a local master runs tasks on (`local` is one, `local[N]` or `local[N,F]` N); else this machine's."""
    if master == "local":
        return 1
    inside = master.partition("[")[2].partition("]")[0].split(",")[0]
    return int(inside) if inside.isdigit() else os.cpu_count() or 1


@dataclass(frozen=True)
class EnginesOptions:
    input: Path | None  # a folder of compacted Parquet histories
    events: int | None  # or generate this many events into `workdir`
    workdir: Path | None
    master: str
    rounds: int
    driver_memory: str
    source: Path | None  # Spark's side from another source tree's audit
    timeout: float  # seconds each child may take
    json: Path | None  # also write the figures here

    def problem(self) -> str | None:
        """Why these options cannot run, or None."""
        if (self.input is None) == (self.events is None) or (self.events is not None and self.workdir is None):
            return "give --input, or --events with --workdir"
        return None


def run_child(engine: str, a: EnginesOptions, input_dir: Path) -> list[dict[str, Any]]:
    """One engine's rounds in a fresh process (`python -m bench audit engines --child ENGINE`); its JSON lines
    carry the figures."""
    argv = module_command("bench", "audit", "engines", "--child", engine, "--input", str(input_dir))
    argv += ["--master", a.master, "--rounds", str(a.rounds), "--driver-memory", a.driver_memory]
    env = bench_env(tree_pythonpath(a.source, ("core", "s3", "spark-jobs")) if a.source is not None else None)
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=a.timeout)
    if done.returncode != 0:
        sys.exit(f"the {engine} run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def prepare_input(a: EnginesOptions) -> Path:
    if a.input is not None:
        return a.input
    assert a.events is not None and a.workdir is not None  # EnginesOptions.problem
    argv = module_command("bench", "audit", "scale", "--events", str(a.events), "--forms", "parquet")
    argv += ["--fast-compact", "--prepare-only", "--master", a.master, "--workdir", str(a.workdir)]
    subprocess.run(argv, check=True, timeout=a.timeout, env=bench_env())
    return a.workdir / f"pq{a.events}"


def child(engine: str, input_dir: Path, master: str, rounds: int, driver_memory: str) -> None:
    """The child's side: one engine's rounds, a JSON line each."""
    runs = (
        spark_rounds(str(input_dir), master, rounds, driver_memory)
        if engine == "spark"
        else duckdb_rounds(str(input_dir), cores_of(master), rounds)
    )
    for r in runs:
        print(json.dumps(r), flush=True)


def main(a: EnginesOptions) -> None:
    input_dir = prepare_input(a)
    figures = {engine: run_child(engine, a, input_dir) for engine in ("spark", "duckdb")}
    print(f"state pass over {input_dir}, master {a.master}, load average {os.getloadavg()[0]:.1f}")
    print("engine   round   wall s   CPU s")
    for engine, runs in figures.items():
        for r in runs:
            print(f"{engine:8} {r['round']:>5} {r['wall_s']:>8.2f} {r['cpu_s']:>7.2f}")
    best = {engine: min(rounds, key=lambda r: r["wall_s"]) for engine, rounds in figures.items()}
    first = {engine: rounds[0] for engine, rounds in figures.items()}
    for label, pick in (("first round", first), ("best round", best)):
        s, d = pick["spark"], pick["duckdb"]
        print(
            f"spark / duckdb, {label}: {s['wall_s'] / d['wall_s']:.2f}x wall, {s['cpu_s'] / max(d['cpu_s'], 1e-9):.2f}x CPU"
        )
    summaries = {engine: rounds[-1]["summary"] for engine, rounds in figures.items()}
    print(f"states: {summaries['spark']['states']:,}")
    if a.json is not None:
        a.json.write_text(json.dumps(figures, indent=2) + "\n")
    if summaries["spark"] != summaries["duckdb"]:
        differ = {
            k: (v, summaries["duckdb"].get(k)) for k, v in summaries["spark"].items() if summaries["duckdb"].get(k) != v
        }
        sys.exit(f"the engines' state tables differ (spark, duckdb): {differ}")
    print("the two state tables agree")
