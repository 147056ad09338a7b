"""`coordinated audit` end to end: exit codes, the report files, compaction to Parquet, --from-cluster."""

from __future__ import annotations

import gzip
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from pyspark.sql import SparkSession

from coordinated.audit.cli import main
from coordinated.audit.synth import HistoryBuilder, SynthConfig, generate

_SEQ = re.compile(r'"seq"\s*:\s*(\d+)')
REPORT_FIELDS = {"ok", "events", "nodes", "malformed_lines", "violations", "resets", "missing_histories", "stats"}


def history(tmp_path: Path) -> HistoryBuilder:
    hb = generate(SynthConfig(events=600, seed=11, nodes=3))
    hb.write(tmp_path / "h")
    return hb


def read_report(d: Path) -> dict:
    return json.loads((d / "audit-report.json").read_text())


def test_valid_history_exits_0_with_report_and_html(spark: SparkSession, tmp_path: Path) -> None:
    history(tmp_path)
    rc = main([str(tmp_path / "h"), "--report-dir", str(tmp_path / "r"), "--spark-master", "local[2]"])
    assert rc == 0
    report = read_report(tmp_path / "r")
    assert set(report) == REPORT_FIELDS
    assert report["ok"] is True and report["violations"] == []
    page = (tmp_path / "r" / "audit-report.html").read_text()
    assert "OK: no violations" in page
    assert page.count("data:image/png;base64,") >= 4
    for title in ("Master timeline", "Failover gaps", "Commit latency", "Per-node lag", "Largest failover gaps"):
        assert title in page
    for column in ("first seq", "last seq", "elections", "truncated lines"):
        assert f"<th>{column}</th>" in page


def test_violations_exit_1(spark: SparkSession, tmp_path: Path) -> None:
    history(tmp_path)
    seg = sorted((tmp_path / "h" / "node-1").glob("history-*.jsonl"))[-1]
    dup = [ln for ln in seg.read_text().splitlines() if '"type":"committed"' in ln][-1]
    with seg.open("a") as fh:
        fh.write(dup + "\n")  # the same event twice: its seq is reused
    rc = main([str(tmp_path / "h"), "--report-dir", str(tmp_path / "r"), "--no-html"])
    assert rc == 1
    report = read_report(tmp_path / "r")
    assert set(report) == REPORT_FIELDS and report["ok"] is False
    (v,) = report["violations"]
    assert v["invariant"] == "history-gap"
    assert [(e["node"], e["seq"]) for e in v["examples"]] == [("node-1", json.loads(dup)["seq"])] * 2
    assert all(set(e) >= {"node", "seq", "term", "version", "state_uuid"} for e in v["examples"])
    assert not (tmp_path / "r" / "audit-report.html").exists()


def test_unusable_input_exits_2_naming_file_and_line(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history(tmp_path)
    seg = tmp_path / "h" / "node-2" / "history-000001.jsonl"
    lines = seg.read_text().splitlines()
    seg.write_text("\n".join([*lines[:9], "not json", *lines[9:]]) + "\n")
    assert main([str(tmp_path / "h"), "--report-dir", str(tmp_path / "r")]) == 2
    assert f"{seg}:10:" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
    assert main([str(tmp_path / "h"), "--report-dir", str(tmp_path / "r"), "--skip-malformed", "--no-html"]) == 0
    assert read_report(tmp_path / "r")["malformed_lines"] == 1
    assert main([str(tmp_path / "missing")]) == 2
    assert main([]) == 2


def test_a_job_that_fails_inside_spark_exits_3_not_1(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A failure inside a Spark job (here a task forced to fail; at scale an OutOfMemoryError or a lost block)
    means nothing was judged: exit 3 with one line naming what failed, never 1 (violations)."""
    from pyspark.sql import functions as F

    from coordinated.audit import prepare

    history(tmp_path)
    monkeypatch.setattr(prepare, "suspect", lambda: F.raise_error(F.lit("forced task failure")).isNull())
    rc = main([str(tmp_path / "h"), "--report-dir", str(tmp_path / "r"), "--no-html"])
    err = capsys.readouterr().err
    assert rc == 3
    (line,) = [text for text in err.splitlines() if text.startswith("coordinated audit:")]
    assert line.startswith("coordinated audit: the audit did not complete: ") and "forced task failure" in line
    assert "Traceback" not in err and not (tmp_path / "r" / "audit-report.json").exists()


def test_an_unexpected_error_exits_3(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from coordinated.audit import run

    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("the report could not be built")

    history(tmp_path)
    monkeypatch.setattr(run, "audit", broken)
    assert main([str(tmp_path / "h"), "--report-dir", str(tmp_path / "r"), "--no-html"]) == 3
    assert "the audit did not complete: RuntimeError: the report could not be built" in capsys.readouterr().err


def test_compact_to_parquet_then_audit_the_parquet(spark: SparkSession, tmp_path: Path) -> None:
    hb = history(tmp_path)
    # A crash cut node-1's last event short (see test_reading for the seq it takes along).
    seg = sorted((tmp_path / "h" / "node-1").glob("history-*.jsonl"))[-1]
    cut_line = len(seg.read_text().splitlines()) + 1
    with seg.open("a") as fh:
        fh.write('{"cluster_uuid":"x","node":"node-1","se')
    pq = tmp_path / "pq"
    args = ["--report-dir", str(tmp_path / "r1"), "--no-html", "--compact-to", str(pq)]
    assert main([str(tmp_path / "h"), *args]) == 0
    first = read_report(tmp_path / "r1")
    clusters = first["stats"]["clusters"]
    assert len(clusters) == 1 and clusters[0] != "_na_"
    dates = list((pq / f"cluster={clusters[0]}").glob("date=*"))
    assert dates and all(list(d.glob("*.parquet")) for d in dates)
    assert main([str(pq), "--report-dir", str(tmp_path / "r2"), "--no-html"]) == 0
    second = read_report(tmp_path / "r2")
    assert second["events"] == first["events"] == sum(hb.seq.values())
    assert [t["line"] for t in second["stats"]["input"]["truncated_lines"]] == [cut_line]
    for key in ("terms", "elections", "commit_latencies", "per_node"):
        assert second["stats"][key] == first["stats"][key]


def _no_jvm_trace(err: str) -> None:
    assert "Traceback" not in err and "\tat org.apache" not in err and "Py4JJavaError" not in err


def test_a_cut_gz_segment_exits_2_naming_the_file(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history(tmp_path)
    seg = sorted((tmp_path / "h" / "node-1").glob("history-*.jsonl"))[0]
    gz = seg.with_name(seg.name + ".gz")
    data = gzip.compress(seg.read_bytes())
    gz.write_bytes(data[: len(data) // 2])  # a copy that stopped half way
    seg.unlink()
    assert main([str(tmp_path / "h"), "--report-dir", str(tmp_path / "r"), "--no-html"]) == 2
    err = capsys.readouterr().err
    assert f"unusable input: cannot read {gz}" in err
    _no_jvm_trace(err)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("damage", ["truncated", "garbled"])
def test_a_corrupt_parquet_file_exits_2_naming_the_file(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    history(tmp_path)
    pq = tmp_path / "pq"
    assert main([str(tmp_path / "h"), "--compact-to", str(pq), "--report-dir", str(tmp_path / "r0"), "--no-html"]) == 0
    victim = max(pq.rglob("*.parquet"), key=lambda p: p.stat().st_size)
    data = victim.read_bytes()
    if damage == "truncated":
        victim.write_bytes(data[: len(data) // 2])
    else:  # the magic bytes are intact, the column data in between is not
        victim.write_bytes(data[:4] + bytes(b ^ 0x5A for b in data[4:-1000]) + data[-1000:])
    capsys.readouterr()
    assert main([str(pq), "--report-dir", str(tmp_path / "r"), "--no-html"]) == 2
    err = capsys.readouterr().err
    assert "unusable input" in err and victim.name in err
    _no_jvm_trace(err)


def test_compaction_appends_and_is_idempotent(spark: SparkSession, tmp_path: Path) -> None:
    """New segments compacted into an existing folder add to it (same cluster and date partitions); the
    same segments compacted again add nothing."""
    hb = generate(SynthConfig(events=600, seed=11, nodes=3))
    hb.write(tmp_path / "all", segment_events=50)
    segments = sorted((tmp_path / "all").rglob("history-*.jsonl"))
    first, second = tmp_path / "first", tmp_path / "second"
    for i, seg in enumerate(segments):
        target = (first if i % 2 == 0 else second) / seg.relative_to(tmp_path / "all")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(seg.read_bytes())
    pq = tmp_path / "pq"
    total = sum(hb.seq.values())

    def compact(src: Path, n: int) -> dict:
        args = [str(src), "--compact-to", str(pq), "--report-dir", str(tmp_path / f"r{n}"), "--no-html"]
        main(args)
        assert main([str(pq), "--report-dir", str(tmp_path / f"p{n}"), "--no-html"]) in (0, 1)
        return read_report(tmp_path / f"p{n}")

    assert compact(first, 1)["events"] < total
    both = compact(second, 2)
    assert both["events"] == total and both["ok"], both["violations"]
    assert compact(tmp_path / "all", 3)["events"] == total  # again, everything: nothing added
    assert compact(first, 4)["events"] == total


class _History(BaseHTTPRequestHandler):
    """Serves /<node>/_history?after_seq=N from fixture lines, at most 7 lines per page."""

    lines: dict[str, list[str]] = {}
    requests: list[str] = []

    def do_GET(self) -> None:
        url = urlparse(self.path)
        node, _, rest = url.path.strip("/").partition("/")
        if rest != "_history" or node not in self.lines:
            self.send_error(404)
            return
        self.requests.append(self.path)
        after = int(parse_qs(url.query).get("after_seq", ["0"])[0])
        page = [ln for ln in self.lines[node] if int(_SEQ.search(ln).group(1)) > after][:7]  # type: ignore[union-attr]
        body = "".join(ln + "\n" for ln in page).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def sidecars() -> Iterator[tuple[str, HistoryBuilder]]:
    hb = generate(SynthConfig(events=300, seed=5, nodes=3))
    _History.lines = hb.lines
    _History.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _History)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hb
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_from_cluster_fetches_every_page_through_spark(
    spark: SparkSession, tmp_path: Path, sidecars: tuple[str, HistoryBuilder]
) -> None:
    base, hb = sidecars
    urls = ",".join(f"{base}/{n}" for n in hb.nodes)
    assert main(["--from-cluster", urls, "--report-dir", str(tmp_path / "r"), "--no-html"]) == 0
    report = read_report(tmp_path / "r")
    assert report["events"] == sum(hb.seq.values()) and report["nodes"] == 3
    # Paging by after_seq: every node was asked for several pages, ending with an empty one.
    for n in hb.nodes:
        pages = [r for r in _History.requests if r.startswith(f"/{n}/")]
        assert len(pages) == hb.seq[n] // 7 + 1 + (1 if hb.seq[n] % 7 else 0)
        assert pages[0].endswith("after_seq=0")


def test_from_cluster_with_a_broken_sidecar_and_a_bad_line(
    spark: SparkSession, tmp_path: Path, sidecars: tuple[str, HistoryBuilder]
) -> None:
    base, hb = sidecars
    assert main(["--from-cluster", f"{base}/node-0,{base}/nobody", "--report-dir", str(tmp_path / "r")]) == 2
    hb.lines["node-1"].insert(3, '{"node": "node-1", "seq": 4, "type": "broken"')
    assert main(["--from-cluster", f"{base}/node-1", "--report-dir", str(tmp_path / "r")]) == 2
