"""The report's charts as base64 PNGs (matplotlib, no display needed)."""

from __future__ import annotations

import base64
import io
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: executors and CI have no display

import matplotlib.pyplot as plt

Figure = Any


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def terms_and_masters(elections: list[tuple[float, int, str]], t0: float) -> str:
    fig, ax = plt.subplots(figsize=(9, 3.2))
    for node in sorted({n for _, _, n in elections}):
        pts = [(ts - t0, term) for ts, term, n in elections if n == node]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=10, label=node)
    ax.set_xlabel("seconds since the first event")
    ax.set_ylabel("term")
    ax.set_title("Elections: term and elected master over time")
    if elections:
        ax.legend(fontsize="small", markerscale=1.5, ncols=2)
    return _png(fig)


def failover_gaps(gaps: list[tuple[float, float, int]], t0: float) -> str:
    fig, ax = plt.subplots(figsize=(9, 3.2))
    ax.vlines([ts - t0 for ts, _, _ in gaps], 0, [g for _, g, _ in gaps], linewidth=1)
    ax.set_xlabel("seconds since the first event")
    ax.set_ylabel("seconds without commits")
    ax.set_title("Failover gaps: last commit of a term to the first commit of the next")
    return _png(fig)


def commit_latency(histogram: list[tuple[float, float]]) -> str:
    """`histogram`: (bin centre in ms, states), from an approximate histogram over log10(ms)."""
    fig, ax = plt.subplots(figsize=(9, 3.2))
    if histogram:
        centres = [c for c, _ in histogram]
        ax.bar(centres, [n for _, n in histogram], width=[c * 0.15 for c in centres])
        ax.set_xscale("log")
    ax.set_xlabel("ms from first accept to the master's commit")
    ax.set_ylabel("states")
    ax.set_title("Commit latency distribution")
    return _png(fig)


def applied_lag(lag: dict[str, Any], t0: float) -> str:
    fig, ax = plt.subplots(figsize=(9, 3.2))
    width = float(lag.get("bin_width_s", 1.0))
    for node, series in sorted(lag.get("nodes", {}).items()):
        xs = [(i + 1) * width for i, v in enumerate(series) if v is not None]
        ax.step(xs, [v for v in series if v is not None], where="post", label=node, linewidth=1)
    ax.set_xlabel("seconds since the first event")
    ax.set_ylabel("committed versions not applied")
    ax.set_title("Per-node applied-version lag")
    if lag.get("nodes"):
        ax.legend(fontsize="small", ncols=2)
    return _png(fig)


def render_all(charts: dict[str, Any]) -> dict[str, str]:
    t0 = float(charts.get("t0") or 0.0)
    return {
        "Terms and masters over time": terms_and_masters(charts.get("elections", []), t0),
        "Failover gaps": failover_gaps(charts.get("gaps", []), t0),
        "Commit latency": commit_latency(charts.get("latency_histogram", [])),
        "Per-node applied-version lag": applied_lag(charts.get("lag", {}), t0),
    }
