"""Render the Grafana dashboard's panels against a real Prometheus fed by a real local cluster.

Grafana itself is not installable here (not in Debian; building it needs its JavaScript front end), so
this evaluates exactly the dashboard's PromQL, with its variables set to "All", in Prometheus (Debian's
`prometheus` package) and screenshots Prometheus's own graph page for every panel target with headless
Chromium (Debian's `chromium`). The cluster is three sidecar processes on 127.0.0.1, scraped with the
labels the chart's PodMonitor gives (job, namespace, cluster, pod, instance); a writer runs throughout and
the master is killed once, so terms, elections, failovers and lag have something to show.

    .venv/bin/python scripts/dashboard-preview.py --out /tmp/dashboard [--seconds 150]

Writes OUT/dashboard.png (every target, one graph each) and OUT/summary.txt (per target: series and
points returned, or the error). Exits 1 if any target fails to evaluate. Needs `prometheus` and
`chromium` on PATH (apt-get install prometheus chromium).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import click

from coordinated.programs import run_program
from coordinated.tools.localcluster import LocalCluster, free_ports

REPO = Path(__file__).resolve().parents[1]
DASHBOARD = REPO / "charts" / "coordinated-cluster" / "dashboards" / "coordinated-cluster.json"
NAMESPACE, CLUSTER = "local", "preview"
SCRAPE_INTERVAL = "2s"


def prometheus_config(nodes: dict[str, str]) -> str:
    """Static targets with the PodMonitor's target labels (no address in any label but `__address__`)."""
    configs = [
        {
            "targets": [address],
            "labels": {"namespace": NAMESPACE, "cluster": CLUSTER, "pod": name, "instance": name},
        }
        for name, address in sorted(nodes.items())
    ]
    return json.dumps(
        {
            "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
            "scrape_configs": [{"job_name": "coordinated-sidecar", "static_configs": configs}],
        }
    )


def targets(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expression) for every panel target, the variables set to match everything."""
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace('=~"$namespace"', '=~".*"').replace('=~"$cluster"', '=~".*"')
            assert "$" not in expr.replace("$__", ""), f"an unsubstituted variable in {expr}"
            legend = target.get("legendFormat", "")
            out.append((f"{panel['title']} ({legend})" if legend else panel["title"], expr))
    return out


def query_range(base: str, expr: str, start: float, end: float) -> dict[str, Any]:
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": "2"})
    try:
        with urllib.request.urlopen(f"{base}/api/v1/query_range?{params}", timeout=30) as response:
            result: dict[str, Any] = json.load(response)
            return result
    except urllib.error.HTTPError as error:
        body: dict[str, Any] = json.load(error)
        return body


def wait_http(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer")


def write_load(cluster: LocalCluster, stop: threading.Event) -> None:
    i = 0
    while not stop.is_set():
        for node in cluster.running():
            with contextlib.suppress(OSError):  # a node being killed or restarted
                node.put(f"/_cluster/metadata/preview-{i % 50}", {"i": i}, timeout=2)
            i += 1
        time.sleep(0.02)


@click.command(help=__doc__.split("\n\n")[0] if __doc__ else None)
@click.option("--out", type=click.Path(path_type=Path), required=True)
@click.option("--seconds", type=float, default=150.0, help="how long the cluster runs under load")
def preview(out: Path, seconds: float) -> int:
    for tool in ("prometheus", "chromium"):
        if shutil.which(tool) is None:
            print(f"{tool} is not on PATH (apt-get install prometheus chromium)", file=sys.stderr)
            return 2
    out.mkdir(parents=True, exist_ok=True)
    dashboard = json.loads(DASHBOARD.read_text())
    work = Path(tempfile.mkdtemp(prefix="dashboard-preview-"))
    cluster = LocalCluster(work / "cluster")
    prometheus: subprocess.Popen[bytes] | None = None
    stop = threading.Event()
    try:
        nodes = cluster.bootstrap(3)
        config = work / "prometheus.yml"
        config.write_text(prometheus_config({node.name: f"127.0.0.1:{node.http_port}" for node in nodes}))
        (port,) = free_ports(1)
        base = f"http://127.0.0.1:{port}"
        log = (work / "prometheus.log").open("wb")
        prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={work / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        wait_http(f"{base}/-/ready", 60)
        started = time.time()
        writer = threading.Thread(target=write_load, args=(cluster, stop), daemon=True)
        writer.start()
        time.sleep(seconds / 3)
        master = cluster.wait_master()
        print(f"killing the master {master.name}", flush=True)
        cluster.kill(master, signal.SIGKILL)
        time.sleep(seconds / 6)
        cluster.start(master.name)
        cluster.wait_http(master)
        time.sleep(seconds / 2)
        stop.set()
        writer.join(5)
        end = time.time()

        summary, failed = [], 0
        for title, expr in targets(dashboard):
            result = query_range(base, expr, started, end)
            if result.get("status") != "success":
                failed += 1
                summary.append(f"ERROR {title}: {result.get('error')}\n    {expr}")
                continue
            series = result["data"]["result"]
            points = sum(len(s["values"]) for s in series)
            labels = sorted({json.dumps(s["metric"], sort_keys=True) for s in series})
            summary.append(f"ok    {title}: {len(series)} series, {points} points\n    {expr}\n    {labels[:4]}")
        for name in ("namespace", "cluster"):
            with urllib.request.urlopen(f"{base}/api/v1/label/{name}/values", timeout=10) as response:
                summary.append(f"label_values({name}): {json.load(response)['data']}")
        (out / "summary.txt").write_text("\n".join(summary) + "\n")
        print("\n".join(summary))

        minutes = max(1, int((end - started) // 60) + 1)
        query = {"g.range_input": f"{minutes}m", "g.end_input": time.strftime("%Y-%m-%d %H:%M", time.gmtime(end + 60))}
        params: dict[str, str] = {}
        for i, (_, expr) in enumerate(targets(dashboard)):
            params |= {f"g{i}.expr": expr, f"g{i}.tab": "0", f"g{i}.range_input": query["g.range_input"]}
        url = f"{base}/classic/graph?{urllib.parse.urlencode(params)}"
        screenshot = out / "dashboard.png"
        subprocess.run(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--window-size=1300,6400", "--virtual-time-budget=20000", f"--screenshot={screenshot}", url],
            check=True, capture_output=True, timeout=180,
        )  # fmt: skip
        print(f"screenshot: {screenshot}\nurl: {url}")
        return 1 if failed else 0
    finally:
        stop.set()
        if prometheus is not None:
            prometheus.terminate()
            try:
                prometheus.wait(10)
            except subprocess.TimeoutExpired:
                prometheus.kill()
        cluster.stop_all(graceful=False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(run_program(preview, None, "scripts/dashboard-preview.py"))
