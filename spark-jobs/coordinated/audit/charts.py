"""The report's charts as base64 PNGs (matplotlib, no display needed), one set per cluster.

Times are absolute UTC. Each chart answers one question a person has after an incident: who was master
when (and for how long there was none), how long failovers take, how long commits take, and which node
fell behind when.
"""

from __future__ import annotations

import base64
import io
from datetime import UTC, datetime
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: executors and CI have no display

import matplotlib.dates as mdates
import matplotlib.pyplot as plt

Figure = Any
ZOOM_REIGNS = 24


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def _time_axis(ax: Any) -> None:
    locator = mdates.AutoDateLocator(tz=UTC)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=UTC))
    ax.set_xlabel("time (UTC)")


def _span(r: dict[str, Any]) -> tuple[float, float] | None:
    """A reign: from the election (or first commit) to stepping down (or the last commit)."""
    start = r["elected_ts"] if r["elected_ts"] is not None else r["first_commit_ts"]
    end = r["stepped_down_ts"] or r["last_commit_ts"] or start
    if start is None:
        return None
    return start, max(end, start)


def master_timeline(reigns: list[dict[str, Any]], title: str) -> str:
    """One row per master; each reign a band; the time with no master shaded red between them."""
    spans = [(r, s) for r in reigns if (s := _span(r)) is not None]
    masters = sorted({r["master"] for r, _ in spans})
    fig, ax = plt.subplots(figsize=(12, 0.5 + 0.42 * max(3, len(masters))))
    row = {m: i for i, m in enumerate(masters)}
    day = 86_400.0
    for r, (a, b) in spans:
        ax.broken_barh([(mdates.date2num(utc(a)), max((b - a) / day, 1e-9))], (row[r["master"]] - 0.35, 0.7),
                       facecolors="#3b7dd8")  # fmt: skip
    covered = None  # the end of the reigns so far: any time after it before the next reign had no master
    for a, b in sorted(s for _, s in spans):
        if covered is not None and a > covered:
            ax.axvspan(mdates.date2num(utc(covered)), mdates.date2num(utc(a)), color="#d62728", alpha=0.3, lw=0)
        covered = b if covered is None else max(covered, b)
    ax.set_yticks(range(len(masters)), masters)
    ax.set_ylim(-0.6, len(masters) - 0.4)
    _time_axis(ax)
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)


def failover_gaps(gaps: list[float]) -> str:
    """Histogram (left axis) and CDF (right axis) of the seconds from one master's last commit to the next's first."""
    fig, ax = plt.subplots(figsize=(12, 3.4))
    if gaps:
        ax.hist(gaps, bins=min(60, max(10, len(gaps) // 5)), color="#3b7dd8", alpha=0.8)
        cdf = ax.twinx()
        xs = sorted(gaps)
        cdf.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], color="#d62728", lw=1.5)
        cdf.set_ylim(0, 1.02)
        cdf.set_ylabel("fraction of failovers (CDF)")
    ax.set_xlabel("seconds without a commit (last commit of a term to the first of the next)")
    ax.set_ylabel("failovers")
    ax.set_title(f"Failover gaps ({len(gaps)})")
    return _png(fig)


def commit_latency(hist: dict[str, Any]) -> str:
    """A linear histogram up to the 99.9th percentile, with p50, p90 and p99 marked."""
    fig, ax = plt.subplots(figsize=(12, 3.4))
    width = float(hist.get("width_ms") or 1.0)
    bins = hist.get("bins") or []
    if bins:
        ax.bar([(b + 0.5) * width for b, _ in bins], [n for _, n in bins], width=width * 0.95, color="#3b7dd8")
        ymax = max(n for _, n in bins)
        marks = zip(("p50", "p90", "p99"), hist.get("p") or [], ("#2ca02c", "#ff7f0e", "#d62728"), strict=False)
        for i, (name, value, color) in enumerate(marks):
            if value is not None:  # labels one under another: percentiles are often close together
                ax.axvline(value, color=color, lw=1.5)
                ax.text(value, ymax * (0.97 - 0.12 * i), f" {name} {value:.1f} ms", color=color, va="top",
                        bbox={"facecolor": "white", "alpha": 0.8, "lw": 0})  # fmt: skip
        ax.set_xlim(0, width * 61)
    ax.set_xlabel("ms from a state's first accept to its master's commit (last bar: beyond the 99.9th percentile)")
    ax.set_ylabel("states")
    ax.set_title("Commit latency")
    return _png(fig)


def lag_heatmap(lag: dict[str, Any], names: list[str], t0: float) -> str:
    """Rows: nodes; columns: time bins; colour: committed versions the node had not applied yet."""
    series = [lag["nodes"][n] for n in names]
    width = float(lag.get("bin_width_s", 1.0))
    fig, ax = plt.subplots(figsize=(12, 0.6 + 0.38 * max(3, len(names))))
    if series:
        import numpy as np

        data = np.array([[float("nan") if v is None else v for v in s] for s in series])
        x0 = mdates.date2num(utc(t0))
        x1 = mdates.date2num(utc(t0 + width * data.shape[1]))
        im = ax.imshow(data, aspect="auto", cmap="magma_r", interpolation="nearest",
                       extent=(x0, x1, len(names) - 0.5, -0.5), vmin=0)  # fmt: skip
        fig.colorbar(im, ax=ax, pad=0.01, label="versions behind")
        labels = lag.get("labels", {})
        ax.set_yticks(range(len(names)), [labels.get(n, n) for n in names])
        _time_axis(ax)
    ax.set_title("Per-node applied-version lag (blank: no events yet)")
    return _png(fig)


def render_cluster(cid: str, charts: dict[str, Any]) -> dict[str, str]:
    reigns = charts.get("reigns", {}).get(cid, [])
    out = {"Master timeline": master_timeline(reigns, "Reigns (bands) and time without a master (red)")}
    gaps = charts.get("gaps", {}).get(cid, [])
    if gaps and reigns:
        worst = max(range(len(gaps)), key=lambda i: gaps[i]["gap_s"])
        term = gaps[worst]["term"]
        at = next((i for i, r in enumerate(reigns) if r["term"] == term), None)
        if at is not None and len(reigns) > ZOOM_REIGNS:
            lo = max(0, at - ZOOM_REIGNS // 2)
            out["Around the largest failover gap"] = master_timeline(
                reigns[lo : lo + ZOOM_REIGNS], f"The {ZOOM_REIGNS} reigns around the largest gap (term {term})"
            )
    out["Failover gaps"] = failover_gaps([g["gap_s"] for g in gaps])
    out["Commit latency"] = commit_latency(charts.get("latency", {}).get(cid, {}))
    lag = charts.get("lag", {})
    names = sorted(n for n, c in lag.get("clusters", {}).items() if c == cid)
    if names:
        out["Per-node lag"] = lag_heatmap(lag, names, float(charts.get("t0") or 0.0))
    return out


def render_all(charts: dict[str, Any]) -> dict[str, dict[str, str]]:
    """cluster -> chart title -> PNG (base64)."""
    return {cid: render_cluster(cid, charts) for cid in charts.get("clusters", [])}
