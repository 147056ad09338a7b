"""Statistics for the report: terms and reigns, failover gaps, commit latencies, per-node figures and lag.

Everything is aggregated in Spark; the driver receives per-node rows, per-term rows (at most `cap`), and
per-(node, time bin) rows for the lag panels.
"""

from __future__ import annotations

import itertools
import math
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import functions as F

from coordinated.audit.invariants.masters import winners
from coordinated.audit.prepare import Frames
from coordinated.audit.reading import display_source, scout
from coordinated.coordination.offline_recovery import MUST_JOIN_ELECTED_MASTER
from coordinated.coordination.state import PLACEHOLDER_PREFIX

LAG_BINS = 120
LAGGING_VERSIONS = 2  # a node at least this many committed versions behind, at some point, is listed
CAP = 20_000
LARGEST = 10


@dataclass
class Stats:
    summary: dict[str, object]  # goes into the report's `stats`
    charts: dict[str, Any] = field(default_factory=dict)  # series for the HTML charts


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), nd)


def node_key(histories: list[Any]) -> dict[tuple[str, str], str]:
    """The report's name for each (cluster, node): the node id, qualified by cluster when ids collide."""
    counts = Counter(h.node for h in histories)
    return {(h.cluster, h.node): h.node if counts[h.node] == 1 else f"{h.node}@{h.cluster}" for h in histories}


@dataclass
class Directory:
    """Who the nodes are: each node id's name as its own events give it, and per cluster the node ids the
    states name (voting configurations, quorums, masters)."""

    names: dict[str, str]  # node id -> node name (a pod name on Kubernetes)
    referenced: dict[str, set[str]]  # cluster -> node ids its states name

    def name(self, node: str | None) -> str | None:
        return self.names.get(node) if node is not None else None

    def label(self, node: str | None) -> str | None:
        """`name (id)` for people; the id alone when the node's name is unknown."""
        name = self.name(node)
        return f"{name} ({node})" if name and node else node


def _not_a_node(node_id: str) -> bool:
    """Configuration entries that stand for no node: a bootstrap placeholder, the detached node's marker."""
    return node_id.startswith(PLACEHOLDER_PREFIX) or node_id in MUST_JOIN_ELECTED_MASTER.node_ids


def directory(fr: Frames) -> Directory:
    """Names per node, and the node ids each cluster's states name: from the scout (the input's first pass
    gathered the distinct names and the distinct configurations, quorums and masters), else one aggregation."""
    found = fr.scout or scout(fr.events)
    names: dict[str, str] = {}
    for r in sorted(found.names, key=lambda r: (r["node"], r["name"]), reverse=True):
        names.setdefault(r["node"], r["name"])
    referenced: dict[str, set[str]] = defaultdict(set)
    for r in found.refs:
        ids = {i for key in ("last_committed_config", "last_accepted_config", "quorum") for i in r[key] or []}
        ids.add(r["master"])
        referenced[r["cluster_uuid"]] |= {i for i in ids if i and not _not_a_node(i)}
    return Directory(names, dict(referenced))


def missing_histories(fr: Frames, who: Directory) -> list[dict[str, Any]]:
    """Nodes a cluster's states name (as voters, quorum members or master) whose history is not in the input:
    typically nodes removed with their volumes. Their part of the story (their accepts, their commits as master)
    cannot be checked, so the report says so instead of staying silent."""
    present = {h.node for h in fr.nodes.histories}
    return [
        {"cluster": cluster, "node": node, "name": who.name(node)}
        for cluster, nodes in sorted(who.referenced.items())
        for node in sorted(nodes - present)
    ]


def compute(fr: Frames, *, truncated: list[dict[str, object]] | None = None, cap: int = CAP) -> Stats:
    np = fr.nodes
    names = node_key(np.histories)
    who = directory(fr)
    cut_by_node = Counter(_cut_node(t, np.streams) for t in truncated or [])
    clusters = sorted({h.cluster for h in np.histories})
    t0 = min((s.first_ts for s in np.streams if s.first_ts is not None), default=0.0)
    t1 = max((s.last_ts for s in np.streams if s.last_ts is not None), default=0.0)

    per_node: dict[str, dict[str, object]] = {}
    for h in np.histories:
        per_node[names[(h.cluster, h.node)]] = {
            "node": h.node,
            "name": who.name(h.node),
            "cluster": h.cluster,
            "events": h.figure("events"),
            "first_seq": min(p.first_seq for p in h.pieces),
            "last_seq": max(p.last_seq for p in h.pieces),
            "first_ts": _r(min((p.first_ts for p in h.pieces if p.first_ts is not None), default=None)),
            "last_ts": _r(max((p.last_ts for p in h.pieces if p.last_ts is not None), default=None)),
            "elections": h.figure("elections"),
            "applied": h.figure("applied"),
            "truncated_lines": cut_by_node.get(h.node, 0),
        }

    won = winners(fr)
    stepped: dict[tuple[str, int], float] = {}
    for r in np.stepdowns:
        cid = np.home_of(r["cluster_uuid"], r["node"], r["_na_origin"])
        key = (cid, r["term"])
        if r["ts"] is not None:
            stepped[key] = min(stepped.get(key, r["ts"]), r["ts"])

    # Per (cluster, term): the commits of the term's master; the reigns and the failover gaps come from these.
    commits = sorted((r for r in fr.per_term() if r["first"] is not None), key=lambda r: (r["cid"], r["term"]))
    terms_truncated = len(commits) > cap
    commits = commits[:cap]
    reigns: dict[str, list[dict[str, Any]]] = defaultdict(list)
    by_term = {(r["cid"], r["term"]): r for r in commits}
    for (cid, term), vs in sorted(won.items()):
        commit = by_term.get((cid, term))
        ts = min((v[1] for v in vs if v[1] is not None), default=None)
        end = stepped.get((cid, term))
        reigns[cid].append(
            {
                "term": term,
                # Charts only: a master is shown by its name and id.
                "master": ", ".join(str(who.label(m)) for m in sorted({v[0] for v in vs})),
                "elected_ts": ts,
                "first_commit_ts": commit["first"] if commit else None,
                "last_commit_ts": commit["last"] if commit else None,
                "commits": int(commit["commits"]) if commit else 0,
                "stepped_down_ts": end,
            }
        )
    gaps: list[dict[str, Any]] = []
    for cid in sorted({c for c, _ in by_term}):
        rows = sorted((r for (c, _), r in by_term.items() if c == cid), key=lambda r: r["term"])
        master_of = {k[1]: v[0][0] for k, v in won.items() if k[0] == cid}
        for prev, cur in itertools.pairwise(rows):
            gaps.append(
                {
                    "cluster": cid,
                    "term": cur["term"],
                    "gap_s": cur["first"] - prev["last"],
                    "from_ts": prev["last"],
                    "to_ts": cur["first"],
                    "from_master": master_of.get(prev["term"]),
                    "to_master": master_of.get(cur["term"]),
                }
            )
    values = sorted(g["gap_s"] for g in gaps)
    largest = sorted(gaps, key=lambda g: -g["gap_s"])[:LARGEST]

    lat = fr.states.select("cid", ((F.col("commit_ts") - F.col("first_accepted_ts")) * 1000.0).alias("ms")).filter(
        F.col("ms").isNotNull()
    )
    lat_agg = lat.agg(
        F.count(F.lit(1)).alias("count"),
        F.mean("ms").alias("mean"),
        F.percentile_approx("ms", [0.5, 0.9, 0.99], 10_000).alias("p"),
        F.max("ms").alias("max"),
    ).collect()[0]
    p_lat = lat_agg["p"] or [None, None, None]
    latency = _latency_histograms(lat)
    lag = _lag(fr, names)
    lag["series"]["labels"] = {key: who.label(node) for (_, node), key in names.items()}
    lagging = [
        {"node": name, **figures}
        for name, figures in sorted(lag["per_node"].items())
        if figures["max_lag_versions"] >= LAGGING_VERSIONS or figures["final_lag_versions"] > 0
    ]

    n_elections = sum(len(v) for v in won.values())
    summary: dict[str, object] = {
        "clusters": clusters,
        "node_names": dict(sorted(who.names.items())),
        "missing_histories": missing_histories(fr, who),
        "time_range": {"first_ts": _r(t0), "last_ts": _r(t1)},
        "per_node": per_node,
        "terms": {
            "count": len({(c, t) for c, t in won} | {(r["cid"], r["term"]) for r in commits}),
            "max_term": max([t for _, t in won] + [r["term"] for r in commits], default=None),
            "with_commits": len(commits),
            "truncated": terms_truncated,
        },
        "elections": {
            "count": n_elections,
            "by_node": {
                names.get((h.cluster, h.node), h.node): h.figure("elections")
                for h in np.histories
                if h.figure("elections")
            },
        },
        "failover_gaps": {
            "count": len(values),
            "mean_s": _r(sum(values) / len(values)) if values else None,
            "p50_s": _r(_quantile(values, 0.5)),
            "p90_s": _r(_quantile(values, 0.9)),
            "p99_s": _r(_quantile(values, 0.99)),
            "max_s": _r(values[-1]) if values else None,
            "largest": [{k: _r(v) if isinstance(v, float) else v for k, v in g.items()} for g in largest],
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
    gaps_by_cluster: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for g in gaps:
        gaps_by_cluster[g["cluster"]].append(g)
    charts: dict[str, Any] = {
        "clusters": [c for c in clusters if c in reigns or c in latency or c in lag["series"]["clusters"].values()],
        "t0": fr.t0,
        "t1": t1,
        "reigns": dict(reigns),
        "gaps": dict(gaps_by_cluster),
        "latency": latency,
        "lag": lag["series"],
    }
    return Stats(summary, charts)


def _latency_histograms(lat: Any, bars: int = 60) -> dict[str, dict[str, Any]]:
    """Per cluster: p50/p90/p99 and a linear histogram up to the 99.9th percentile (the rest in one more bar)."""
    per = {
        r["cid"]: r["p"]
        for r in lat.groupBy("cid").agg(F.percentile_approx("ms", [0.5, 0.9, 0.99, 0.999], 10_000).alias("p")).collect()
    }
    if not per:
        return {}
    widths = {cid: max(float(p[3] or 0.0), 1e-3) / bars for cid, p in per.items()}
    width_of = F.create_map(*[x for cid, w in widths.items() for x in (F.lit(cid), F.lit(w))])
    rows = (
        lat.select("cid", F.least(F.floor(F.col("ms") / width_of[F.col("cid")]), F.lit(bars)).cast("int").alias("b"))
        .groupBy("cid", "b")
        .count()
        .collect()
    )
    out: dict[str, dict[str, Any]] = {
        cid: {"width_ms": widths[cid], "bins": [], "p": [_r(x) for x in p[:3]]} for cid, p in per.items()
    }
    for r in rows:
        out[r["cid"]]["bins"].append((int(r["b"]), int(r["count"])))
    for v in out.values():
        v["bins"].sort()
    return out


def _cut_node(note: dict[str, object], streams: list[Any]) -> str:
    """The node a crash-cut line belongs to: named in the cut text, or else the node whose folder holds it."""
    if note.get("node"):
        return str(note["node"])
    folder = os.path.dirname(str(note.get("source")))
    return next((s.node for s in streams if display_source(s.origin) == folder), "")


def _quantile(values: list[float], q: float) -> float | None:
    """Nearest-rank quantile of sorted `values`."""
    if not values:
        return None
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


def _lag(fr: Frames, names: dict[tuple[str, str], str], bins: int = LAG_BINS) -> dict[str, Any]:
    """Per node and time bin: committed versions of its cluster that it had not applied by the bin's end.

    The window pass gives each node's highest applied version at its last event of every bin; the state
    table gives each cluster's highest committed version per bin.
    """
    width = fr.lag_width or 1.0
    b = F.greatest(
        F.lit(0), F.least(F.floor((F.col("commit_ts") - F.lit(fr.t0)) / F.lit(width)), F.lit(bins - 1))
    ).cast("int")
    top: dict[str, list[int]] = {}
    for r in (
        fr.states.filter(F.col("commit_ts").isNotNull())
        .groupBy("cid", b.alias("bin"))
        .agg(F.max("version").alias("v"))
        .collect()
    ):
        top.setdefault(r["cid"], [0] * bins)[r["bin"]] = r["v"]
    mine: dict[tuple[str, str], list[int]] = {}
    for r in fr.nodes.lag_rows:
        cid = fr.nodes.home_of(r["cluster_uuid"], r["node"], r["_na_origin"])
        row = mine.setdefault((cid, r["node"]), [0] * bins)
        row[r["bin"]] = max(row[r["bin"]], r["max_applied"])
    for row in top.values():
        for i in range(1, bins):
            row[i] = max(row[i], row[i - 1])
    series: dict[str, Any] = {"bin_width_s": width, "nodes": {}, "clusters": {}}
    per_node: dict[str, dict[str, object]] = {}
    for (cid, node), row in sorted(mine.items()):
        name = names.get((cid, node), node)
        started = next((i for i, v in enumerate(row) if v), 0)
        cur, lags = 0, []
        for i in range(bins):
            cur = max(cur, row[i])
            lags.append(max(0, top.get(cid, [0] * bins)[i] - cur) if i >= started else None)
        seen = [x for x in lags if x is not None]
        series["nodes"][name] = lags
        series["clusters"][name] = cid
        per_node[name] = {
            "cluster": cid,
            "max_lag_versions": max(seen, default=0),
            "final_lag_versions": seen[-1] if seen else 0,
            "mean_lag_versions": _r(sum(seen) / len(seen)) if seen else 0.0,
        }
    return {"series": series, "per_node": per_node}
