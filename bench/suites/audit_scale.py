"""Audit throughput at scale: synthetic valid histories of 1M and 10M events, JSONL and Parquet.

    .venv/bin/python -m bench audit scale --events 1000000 --events 10000000 --master 'local[2]'

For each size it writes a 5-node history with the tests' generator (`coordinated.audit.synth`: many
terms, changing masters, failed publications re-published by the next master, lagging and restarting
nodes), then runs `coordinated audit` as a subprocess on the JSONL, compacts it to Parquet, and audits
the Parquet. It prints events/s (audit time as the CLI reports it, without JVM start-up, and end to
end) and the peak RSS of the driver: the Python process plus its JVM, which in local mode also runs
the executors, and the anchor's own events/s beside the ratio. With `--workdir` the generated (and
compacted) histories are kept and reused by later runs, so several runs measure the same input.
With `--event-log DIR` both the audit and the anchor write Spark's event log there, and the figures add each
one's Spark job count and executor CPU-seconds (the sum over its tasks): on a shared machine the CPU-seconds
move much less with the load than the wall time does.
Figures only: nothing here asserts on timing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from coordinated.audit.synth import SynthConfig, write_history

PAGE = os.sysconf("SC_PAGE_SIZE")


def _children(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(entry))
    return kids


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


class PeakRss(threading.Thread):
    """Samples the RSS of a process and all its descendants (the driver and its JVM)."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak_total = self.peak_python = self.peak_jvm = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            tree, frontier = [], [self.pid]
            while frontier:
                p = frontier.pop()
                tree.append(p)
                frontier.extend(_children(p))
            sizes = {p: _rss(p) for p in tree}
            self.peak_python = max(self.peak_python, sizes.get(self.pid, 0))
            self.peak_jvm = max(self.peak_jvm, sum(v for p, v in sizes.items() if p != self.pid))
            self.peak_total = max(self.peak_total, sum(sizes.values()))
            time.sleep(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def run_measured(cmd: list[str]) -> tuple[int, float, str, PeakRss]:
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    meter = PeakRss(proc.pid)
    meter.start()
    out, err = proc.communicate()
    meter.stop()
    if proc.returncode not in (0, 1):
        sys.stderr.write(err[-4000:])
    return proc.returncode, time.monotonic() - start, out, meter


COMPACT = """
import sys, time
from coordinated.audit.session import build_session
from pyspark.sql import functions as F
from coordinated.audit.reading import Input, load, origin_of
from coordinated.audit.compact import compact
from coordinated.audit.schema import EVENT_SCHEMA
spark = build_session(sys.argv[1], {"spark.ui.showConsoleProgress": "false", "spark.driver.memory": sys.argv[4]})
t = time.monotonic()
if sys.argv[5] == "fast":  # plain JSON reader: no malformed-line detection, no line numbers, no cache
    raw = spark.read.schema(EVENT_SCHEMA).option("recursiveFileLookup", "true").json(sys.argv[2])
    source = F.col("_metadata.file_path")
    inp = Input(events=raw.select("*", source.alias("_source"), origin_of(source).alias("_origin")))
else:
    inp = load(spark, [sys.argv[2]])
compact(spark, inp, sys.argv[3])
print(f"compacted in {time.monotonic() - t:.1f}s")
"""


ANCHOR = """
import json, sys, time
from pyspark.sql import Window
from pyspark.sql import functions as F
from coordinated.audit.schema import EVENT_SCHEMA
from coordinated.audit.session import build_session
conf = {"spark.ui.showConsoleProgress": "false", "spark.driver.memory": sys.argv[4], **json.loads(sys.argv[5])}
spark = build_session(sys.argv[1], conf)
t = time.monotonic()
reader = spark.read.schema(EVENT_SCHEMA).option("recursiveFileLookup", "true")
df = reader.parquet(sys.argv[2]) if sys.argv[3] == "parquet" else reader.json(sys.argv[2])
w = Window.partitionBy("node").orderBy("seq")
x = df.withColumn("hole", (F.col("seq") != F.lag("seq").over(w) + 1).cast("int"))
states = x.filter(F.col("type").isin("accepted", "committed", "applied")).groupBy("cluster_uuid", "state_uuid").agg(
    F.count(F.lit(1)).alias("n"), F.min("term"), F.max("version"), F.sum("hole")
)
states.write.format("noop").mode("overwrite").save()
print(f"anchor {time.monotonic() - t:.2f}s")
"""


def event_log_conf(folder: Path | None) -> dict[str, str]:
    """Spark settings that write one application's event log (uncompressed) into `folder`."""
    if folder is None:
        return {}
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": folder.resolve().as_uri(),
        "spark.eventLog.compress": "false",
    }


def event_log_figures(folder: Path | None) -> dict[str, float]:
    """Spark jobs and executor CPU-seconds (all tasks) of the one application that logged into `folder`."""
    if folder is None:
        return {}
    jobs, cpu_ns = 0, 0
    for log in sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith((".", "appstatus"))):
        with log.open() as fh:
            for line in fh:
                if '"SparkListenerJobStart"' in line:
                    jobs += 1
                elif '"SparkListenerTaskEnd"' in line:
                    cpu_ns += (json.loads(line).get("Task Metrics") or {}).get("Executor CPU Time", 0)
    return {"spark_jobs": jobs, "cpu_s": round(cpu_ns / 1e9, 1)}


def conf_args(conf: dict[str, str]) -> list[str]:
    """Spark settings as the audit CLI's `--conf KEY=VALUE` arguments."""
    return [arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")]


def run_anchor(path: Path, form: str, master: str, driver_memory: str, conf: dict[str, str] | None = None) -> float:
    """The minimal job the audit is measured against: one scan, one window over (node, seq), one per-state
    groupBy. Seconds, without JVM start-up (as the audit's own figure)."""
    out = subprocess.run(
        [sys.executable, "-c", ANCHOR, master, str(path), form, driver_memory, json.dumps(conf or {})],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    m = re.search(r"anchor ([\d.]+)s", out)
    return float(m.group(1)) if m else float("nan")


def bench_one(
    events: int,
    workdir: Path,
    master: str,
    driver_memory: str,
    seed: int,
    forms: list[str],
    fast_compact: bool,
    prepare_only: bool = False,
    event_log: Path | None = None,
    conf: dict[str, str] | None = None,
) -> dict[str, object]:
    conf = conf or {}
    jsonl, pq, reports = workdir / f"h{events}", workdir / f"pq{events}", workdir / f"r{events}"
    cfg = SynthConfig(events=events, seed=seed, nodes=5, mean_term_length=40, p_restart=0.1)
    made = workdir / f"h{events}.done"  # what a finished generation wrote: reused by later runs with this workdir
    shutil.rmtree(reports, ignore_errors=True)
    if made.exists() and json.loads(made.read_text())["config"] == repr(cfg):
        n, gen_s = int(json.loads(made.read_text())["events"]), float("nan")
        print(f"[{events:,}] reusing {n:,} generated events in {jsonl}", flush=True)
    else:
        for p in (jsonl, pq):
            shutil.rmtree(p, ignore_errors=True)
        (workdir / f"pq{events}.done").unlink(missing_ok=True)
        t = time.monotonic()
        n = write_history(cfg, jsonl, segment_events=500_000)
        gen_s = time.monotonic() - t
        made.write_text(json.dumps({"config": repr(cfg), "events": n}))
    size = sum(f.stat().st_size for f in jsonl.rglob("*.jsonl"))
    made_in = "reused" if gen_s != gen_s else f"generated in {gen_s:.1f}s"
    print(f"[{events:,}] {n:,} events ({size / 1e6:.0f} MB JSONL), {made_in}", flush=True)
    result: dict[str, object] = {"events": n, "jsonl_mb": round(size / 1e6), "generate_s": round(gen_s, 1)}

    audit = [sys.executable, "-m", "coordinated.audit.cli", "--spark-master", master, "--no-html"]
    audit += ["--conf", f"spark.driver.memory={driver_memory}", "--conf", "spark.ui.showConsoleProgress=false"]
    audit += conf_args(conf)
    for form, path in (("jsonl", jsonl), ("parquet", pq)):
        if form not in forms:
            continue
        if form == "parquet":
            t = time.monotonic()
            mode = "fast" if fast_compact else "audit"
            compacted = workdir / f"pq{events}.done"
            if not compacted.exists():
                shutil.rmtree(pq, ignore_errors=True)
                subprocess.run(
                    [sys.executable, "-c", COMPACT, master, str(jsonl), str(pq), driver_memory, mode],
                    check=True,
                    capture_output=True,
                )
                compacted.write_text(mode)
            result["compact_s"] = round(time.monotonic() - t, 1)  # about 0 when reused
            result["compact_mode"] = compacted.read_text()
            pq_size = sum(f.stat().st_size for f in pq.rglob("*.parquet"))
            result["parquet_mb"] = round(pq_size / 1e6)
            print(f"[{events:,}] compacted to {pq_size / 1e6:.0f} MB Parquet in {result['compact_s']}s", flush=True)
        if prepare_only:
            continue
        logs = {who: event_log / f"{events}-{form}-{who}" if event_log else None for who in ("anchor", "audit")}
        anchor_s = run_anchor(path, form, master, driver_memory, conf | event_log_conf(logs["anchor"]))
        audit_conf = conf_args(event_log_conf(logs["audit"]))
        rc, wall, out, meter = run_measured([*audit, *audit_conf, str(path), "--report-dir", str(reports / form)])
        report = json.loads((reports / form / "audit-report.json").read_text())
        m = re.search(r"audited (\d+) events from \d+ nodes in ([\d.]+)s", out)
        audit_s = float(m.group(2)) if m else float("nan")
        figures = {
            "exit_code": rc,
            "ok": report["ok"],
            "audited_events": report["events"],
            "audit_s": audit_s,
            "wall_s": round(wall, 1),
            "events_per_s": round(report["events"] / audit_s) if audit_s == audit_s else None,
            "events_per_s_end_to_end": round(report["events"] / wall),
            "anchor_s": anchor_s,
            "anchor_events_per_s": round(report["events"] / anchor_s) if anchor_s == anchor_s else None,
            "vs_anchor": round(anchor_s / audit_s, 2) if audit_s == audit_s and anchor_s == anchor_s else None,
            "load_average": os.getloadavg()[0],
            "peak_rss_mb_driver_total": round(meter.peak_total / 2**20),
            "peak_rss_mb_python": round(meter.peak_python / 2**20),
            "peak_rss_mb_jvm": round(meter.peak_jvm / 2**20),
        }
        if event_log is not None:
            mine, anchor = event_log_figures(logs["audit"]), event_log_figures(logs["anchor"])
            figures |= {f"audit_{k}": v for k, v in mine.items()} | {f"anchor_{k}": v for k, v in anchor.items()}
            if mine["cpu_s"]:
                figures["vs_anchor_cpu"] = round(anchor["cpu_s"] / mine["cpu_s"], 2)
        result[form] = figures
        print(f"[{events:,}] {form}: {json.dumps(figures)}", flush=True)
    return result


@dataclass(frozen=True)
class ScaleOptions:
    """`python -m bench audit scale`'s options (parsed in bench/cli.py)."""

    events: tuple[int, ...] = (1_000_000, 10_000_000)
    master: str = "local[2]"
    driver_memory: str = "1g"
    workdir: Path | None = None
    seed: int = 42
    json: Path | None = None
    forms: tuple[str, ...] = ("jsonl", "parquet")
    fast_compact: bool = False
    prepare_only: bool = False
    event_log: Path | None = None
    conf: tuple[tuple[str, str], ...] = ()


def main(a: ScaleOptions) -> None:
    conf = dict(a.conf)
    workdir = a.workdir or Path(tempfile.mkdtemp(prefix="audit-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        results = [
            bench_one(
                n,
                workdir,
                a.master,
                a.driver_memory,
                a.seed,
                list(a.forms),
                a.fast_compact,
                a.prepare_only,
                a.event_log,
                conf,
            )
            for n in a.events
        ]
    finally:
        if a.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    if a.prepare_only:
        return
    print(f"\nmaster {a.master}; load average now {os.getloadavg()}")
    print("events      form     audit s   events/s   anchor s  anchor ev/s  vs anchor  peak driver RSS (python + JVM)")
    for r in results:
        for form in a.forms:
            f = r[form]
            assert isinstance(f, dict)
            print(
                f"{r['events']:>10,}  {form:8} {f['audit_s']:>8.1f} {f['events_per_s']:>10,} "
                f"{f['anchor_s']:>8.1f} {f['anchor_events_per_s']:>12,} {f['vs_anchor']:>9}x  "
                f"{f['peak_rss_mb_driver_total']:,} MB ({f['peak_rss_mb_python']} + {f['peak_rss_mb_jvm']})"
            )
            if "audit_cpu_s" in f:
                print(
                    f"{'':30}executor CPU-s: audit {f['audit_cpu_s']} in {f['audit_spark_jobs']} jobs, anchor "
                    f"{f['anchor_cpu_s']} in {f['anchor_spark_jobs']} jobs: {f.get('vs_anchor_cpu')}x"
                )
    if a.json:
        a.json.write_text(json.dumps(results, indent=2) + "\n")
