"""Statistics for the report: terms, elections, failover gaps, commit latencies, lagging nodes.

Everything is aggregated in Spark; the driver receives per-node rows, per-time-bin rows and at most
`cap` per-election rows (the newest are dropped past that, and the report says so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Window
from pyspark.sql import functions as F

from coordinated.audit.prepare import Frames
from coordinated.audit.schema import UNBOOTSTRAPPED

LAG_BINS = 100
LAGGING_VERSIONS = 2  # a node at least this many committed versions behind, at some point, is listed
CAP = 20_000


@dataclass
class Stats:
    summary: dict[str, object]  # goes into the report's `stats`
    charts: dict[str, object] = field(default_factory=dict)  # series for the HTML charts


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), nd)


def compute(fr: Frames, *, cap: int = CAP, bins: int = LAG_BINS) -> Stats:
    per_node = fr.node_rows
    clusters = sorted({r["cluster"] or UNBOOTSTRAPPED for r in per_node})
    t0 = min((r["first_ts"] for r in per_node if r["first_ts"] is not None), default=0.0)
    t1 = max((r["last_ts"] for r in per_node if r["last_ts"] is not None), default=0.0)

    # Per-term rows are few (one per election); the driver gets at most `cap` of them.
    term_rows = (
        fr.terms.select("cid", "term", "winners", "elected_ts").orderBy("elected_ts", "term").limit(cap + 1).collect()
    )
    if len(term_rows) <= cap:
        n_terms = len(term_rows)
        max_term = max((r["term"] for r in term_rows), default=None)
        n_elections = sum(len(r["winners"]) for r in term_rows)
        no_winner = sum(1 for r in term_rows if not r["winners"])
    else:
        agg = fr.terms.agg(
            F.count(F.lit(1)).alias("n"),
            F.max("term").alias("max"),
            F.sum(F.size("winners")).alias("elections"),
            F.sum((F.size("winners") == 0).cast("long")).alias("without_winner"),
        ).collect()[0]
        n_terms, max_term, n_elections, no_winner = agg["n"], agg["max"], agg["elections"], agg["without_winner"]
    elections = [(r["elected_ts"], r["term"], w) for r in term_rows[:cap] for w in r["winners"]]

    # Failover gap: from the last commit of one term to the first commit of the next term with commits.
    commits = fr.states.filter(F.col("commit_ts").isNotNull())
    per_term = commits.groupBy("cid", "term").agg(
        F.min("commit_ts").alias("first"), F.max("commit_ts").alias("last"), F.max("master").alias("master")
    )
    w = Window.partitionBy("cid").orderBy("term")
    gaps = per_term.select(
        "cid",
        "term",
        "master",
        F.col("first").alias("ts"),
        (F.col("first") - F.lag("last").over(w)).alias("gap"),
        F.lag("master").over(w).alias("previous_master"),
    ).filter(F.col("gap").isNotNull())
    gap_rows = gaps.orderBy("ts").limit(cap + 1).collect()
    if len(gap_rows) <= cap:
        values = sorted(r["gap"] for r in gap_rows)
        gap_fig: dict[str, Any] = {
            "count": len(values),
            "mean": sum(values) / len(values) if values else None,
            "p": [_quantile(values, 0.5), _quantile(values, 0.95)],
            "max": values[-1] if values else None,
        }
        largest = sorted(gap_rows, key=lambda r: -r["gap"])[:5]
    else:
        gap_fig = (
            gaps.agg(
                F.count(F.lit(1)).alias("count"),
                F.mean("gap").alias("mean"),
                F.percentile_approx("gap", [0.5, 0.95], 1000).alias("p"),
                F.max("gap").alias("max"),
            )
            .collect()[0]
            .asDict()
        )
        largest = gaps.orderBy(F.desc("gap")).limit(5).collect()
    gap_series = gap_rows[:cap]

    lat = fr.states.select(((F.col("commit_ts") - F.col("first_accepted_ts")) * 1000.0).alias("ms")).filter(
        F.col("ms").isNotNull()
    )
    # One job: the figures and a histogram over log10(ms) for the chart.
    lat_agg = lat.agg(
        F.count(F.lit(1)).alias("count"),
        F.mean("ms").alias("mean"),
        F.percentile_approx("ms", [0.5, 0.9, 0.99], 1000).alias("p"),
        F.max("ms").alias("max"),
        F.histogram_numeric(F.log10(F.greatest(F.col("ms"), F.lit(0.001))), F.lit(30)).alias("hist"),
    ).collect()[0]

    lag = _lag(fr, t0, t1, bins)
    lagging = [
        {"node": node, **figures}
        for node, figures in sorted(lag["per_node"].items())
        if figures["max_lag_versions"] >= LAGGING_VERSIONS or figures["final_lag_versions"] > 0
    ]

    p_gap = gap_fig["p"] or [None, None]
    p_lat = lat_agg["p"] or [None, None, None]
    summary: dict[str, object] = {
        "clusters": clusters,
        "time_range": {"first_ts": _r(t0), "last_ts": _r(t1)},
        "per_node": {
            r["node"]: {
                "events": int(r["events"]),
                "first_seq": r["first_seq"],
                "last_seq": r["last_seq"],
                "cluster": r["cluster"] or UNBOOTSTRAPPED,
                "elections": int(r["elections"]),
                "applied": int(r["applied"]),
            }
            for r in per_node
        },
        "terms": {
            "count": int(n_terms or 0),
            "max_term": max_term,
            "without_elected_master": int(no_winner or 0),
        },
        "elections": {
            "count": int(n_elections or 0),
            "by_node": {r["node"]: int(r["elections"]) for r in per_node if r["elections"]},
        },
        "failover_gaps": {
            "count": int(gap_fig["count"] or 0),
            "mean_s": _r(gap_fig["mean"]),
            "p50_s": _r(p_gap[0]),
            "p95_s": _r(p_gap[1]),
            "max_s": _r(gap_fig["max"]),
            "largest": [
                {
                    "cluster": r["cid"],
                    "term": r["term"],
                    "gap_s": _r(r["gap"]),
                    "from_master": r["previous_master"],
                    "to_master": r["master"],
                }
                for r in largest
            ],
        },
        "commit_latencies": {
            "count": int(lat_agg["count"] or 0),
            "mean_ms": _r(lat_agg["mean"]),
            "p50_ms": _r(p_lat[0]),
            "p90_ms": _r(p_lat[1]),
            "p99_ms": _r(p_lat[2]),
            "max_ms": _r(lat_agg["max"]),
        },
        "lagging_nodes": lagging,
    }
    charts: dict[str, object] = {
        "t0": t0,
        "elections": elections,
        "elections_truncated": len(term_rows) > cap,
        "gaps": [(r["ts"], r["gap"], r["term"]) for r in gap_series],
        "latency_histogram": [(10 ** float(h["x"]), float(h["y"])) for h in (lat_agg["hist"] or [])],
        "lag": lag["series"],
    }
    return Stats(summary, charts)


def _quantile(values: list[float], q: float) -> float | None:
    """Nearest-rank quantile of sorted `values`."""
    if not values:
        return None
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


def _lag(fr: Frames, t0: float, t1: float, bins: int) -> dict[str, Any]:
    """Per node and time bin: committed versions (of its cluster) it had not applied by the bin's end."""
    width = max((t1 - t0) / bins, 1e-9)
    b = F.least(F.floor((F.col("ts") - F.lit(t0)) / F.lit(width)), F.lit(bins - 1)).cast("int").alias("bin")
    ev = fr.events
    typ = F.col("type")
    rows = (
        ev.filter(typ.isin("committed", "applied") & F.col("ts").isNotNull())
        .groupBy("cid", "node", b)
        .agg(
            F.max(F.when(typ == "committed", F.col("version"))).alias("committed"),
            F.max(F.when(typ == "applied", F.col("version"))).alias("applied"),
        )
        .collect()
    )  # nodes x bins rows
    top: dict[str, list[int]] = {}
    mine: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        if r["committed"] is not None:
            row = top.setdefault(r["cid"], [0] * bins)
            row[r["bin"]] = max(row[r["bin"]], r["committed"])
        if r["applied"] is not None:
            mine.setdefault((r["cid"], r["node"]), [0] * bins)[r["bin"]] = r["applied"]
    for row in top.values():
        for i in range(1, bins):
            row[i] = max(row[i], row[i - 1])
    series: dict[str, Any] = {"bin_width_s": width, "nodes": {}}
    per_node: dict[str, dict[str, object]] = {}
    for (cid, node), row in sorted(mine.items()):
        started = next((i for i, v in enumerate(row) if v), 0)
        cur, lags = 0, []
        for i in range(bins):
            cur = max(cur, row[i])
            lags.append(max(0, top.get(cid, [0] * bins)[i] - cur) if i >= started else None)
        seen = [x for x in lags if x is not None]
        series["nodes"][node] = lags
        per_node[node] = {
            "max_lag_versions": max(seen, default=0),
            "final_lag_versions": seen[-1] if seen else 0,
            "mean_lag_versions": _r(sum(seen) / len(seen)) if seen else 0.0,
        }
    return {"series": series, "per_node": per_node}
