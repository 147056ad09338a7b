"""The report: `audit-report.json` (docs/audit.md fields, exactly) and `audit-report.html`."""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import Row

from coordinated.audit.schema import INVARIANTS
from coordinated.audit.stats import Stats
from coordinated.audit.violations import CheckResult

JSON_NAME = "audit-report.json"
HTML_NAME = "audit-report.html"


def resets_of(rows: list[Row]) -> list[dict[str, Any]]:
    """One entry per reset event (`coordinated node-tool`): an auditor must see that an unsafe operation
    happened, even when every invariant holds."""
    return [
        {
            "node": r["node"],
            "type": r["type"],
            "ts": r["ts"],
            "time (UTC)": utc_text(r["ts"]),
            "seq": r["seq"],
            "previous_cluster_uuid": r["previous_cluster_uuid"],
            "cluster_uuid": r["cluster_uuid"],
            "previous_term_version": [r["previous_term"], r["previous_version"]],
            "term_version": [r["term"], r["version"]],
            "current_term": r["current_term"],
        }
        for r in rows
    ]


def build(
    *,
    events: int,
    nodes: int,
    malformed_lines: int,
    results: list[CheckResult],
    stats: Stats,
    extra: dict[str, Any],
    resets: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    order = {name: i for i, name in enumerate(INVARIANTS)}
    results = sorted(results, key=lambda r: order.get(r.invariant, len(order)))
    summary = dict(stats.summary)
    missing = summary.pop("missing_histories", [])
    summary["violation_counts"] = {r.invariant: r.total for r in results}
    summary.update(extra)
    return {
        "ok": all(r.total == 0 for r in results),
        "events": events,
        "nodes": nodes,
        "malformed_lines": malformed_lines,
        "violations": [v.to_json() for r in results for v in r.violations],
        # Operator resets: not violations, but a node's state was changed offline (writes may be lost).
        "resets": resets or [],
        # Nodes the states name without a history in the input (removed with their volumes): not checked.
        "missing_histories": missing,
        "stats": summary,
    }


def write(
    report: dict[str, Any], report_dir: Path, charts: dict[str, dict[str, str]] | None
) -> tuple[Path, Path | None]:
    report_dir.mkdir(parents=True, exist_ok=True)
    json_path = report_dir / JSON_NAME
    json_path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    html_path = None
    if charts is not None:
        html_path = report_dir / HTML_NAME
        html_path.write_text(render_html(report, charts))
    return json_path, html_path


# The fields each invariant's violations are about: an example shows these first (then the rest).
RELEVANT: dict[str, tuple[str, ...]] = {
    "one-master-per-term": ("node", "type", "term", "master", "state_uuid"),
    "unique-state-per-version": (
        "node", "type", "term", "version", "state_uuid", "parent_uuid", "master",
        "last_committed_config", "last_accepted_config",
    ),
    "committed-chain": ("node", "type", "term", "version", "state_uuid", "parent_uuid"),
    "applied-only-committed": ("node", "type", "term", "version", "state_uuid", "master"),
    "node-monotonic": ("node", "type", "term", "version"),
    "commit-quorum": (
        "node", "type", "term", "version", "state_uuid", "quorum", "last_committed_config", "last_accepted_config",
    ),
    "history-gap": ("node", "type", "term", "version"),
    "node-cluster-stable": ("node", "cluster_uuid", "type", "term"),
}  # fmt: skip


def utc_text(ts: Any) -> str:
    if ts is None:
        return ""
    return datetime.fromtimestamp(float(ts), tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _cell(v: Any) -> str:
    if isinstance(v, list):
        v = ", ".join(str(x) for x in v)
    return html.escape("" if v is None else str(v))


def _table(rows: list[dict[str, Any]], cols: list[str] | None = None, cls: str = "") -> str:
    if not rows:
        return ""
    cols = cols or list(rows[0])
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{_cell(r.get(c))}</td>" for c in cols) + "</tr>" for r in rows)
    return f"<table class='{cls}'><tr>{head}</tr>{body}</table>"


def _example_table(invariant: str, examples: list[dict[str, Any]], stats: dict[str, Any]) -> str:
    rows = []
    for e in examples:
        where = str(e.get("file") or "")
        line = f":{e['line']}" if e.get("line") else ""
        where = f"{where}{line} (seq {e.get('seq')})"
        rows.append({"where": where, "time (UTC)": utc_text(e.get("ts")), **e, "node": _label(stats, e.get("node"))})
    cols = ["where", "time (UTC)", *RELEVANT.get(invariant, ("node", "type", "term", "version", "state_uuid"))]
    return _table(rows, cols, "ex")


def _label(stats: dict[str, Any], node: str | None) -> str | None:
    """`name (id)` when the node's events gave its name (a pod name on Kubernetes), else the id."""
    name = stats.get("node_names", {}).get(node) if node is not None else None
    return f"{name} ({node})" if name else node


def _missing_note(missing: list[dict[str, Any]]) -> str:
    if not missing:
        return ""
    nodes = ", ".join(m["node"] + (f" ({m['name']})" if m.get("name") else "") for m in missing)
    return f"<p class='bad'>Histories missing for {len(missing)} node(s) the states name: {html.escape(nodes)}.</p>"


def _missing_table(missing: list[dict[str, Any]]) -> str:
    if not missing:
        return "<p>none: every node the states name has its history in the input</p>"
    note = (
        "<p class='bad'>These nodes are named by the states (voting configurations, quorums or as master) but "
        "their histories are not in the input: typically nodes removed with their volumes. Their accepts and "
        "their commits as master could not be checked; ship histories off the nodes before removing them to "
        "audit them too.</p>"
    )
    rows = [{"cluster": m["cluster"], "node": m["node"], "name": m.get("name") or "unknown"} for m in missing]
    return note + _table(rows)


def _img(title: str, png: str) -> str:
    return f"<h4>{html.escape(title)}</h4><img alt='{html.escape(title)}' src='data:image/png;base64,{png}'>"


def _cluster_section(cid: str, stats: dict[str, Any], charts: dict[str, str]) -> str:
    nodes = [
        {
            "node": v["node"],
            "name": v.get("name") or "",
            "events": v["events"],
            "first seq": v["first_seq"],
            "last seq": v["last_seq"],
            "first event (UTC)": utc_text(v.get("first_ts")),
            "last event (UTC)": utc_text(v.get("last_ts")),
            "elections": v["elections"],
            "applied": v["applied"],
            "truncated lines": v.get("truncated_lines", 0),
        }
        for v in stats.get("per_node", {}).values()
        if v["cluster"] == cid
    ]
    gaps = [
        {
            "term": g["term"],
            "gap (s)": g["gap_s"],
            "from master": _label(stats, g["from_master"]),
            "to master": _label(stats, g["to_master"]),
            "last commit before (UTC)": utc_text(g["from_ts"]),
            "first commit after (UTC)": utc_text(g["to_ts"]),
        }
        for g in stats.get("failover_gaps", {}).get("largest", [])
        if g["cluster"] == cid
    ]
    figs = "".join(_img(t, png) for t, png in charts.items() if t not in ("Per-node lag",))
    lag = _img("Per-node lag", charts["Per-node lag"]) if "Per-node lag" in charts else ""
    return (
        f"<section id='c-{html.escape(cid)}'><h2>Cluster {html.escape(cid)}</h2>"
        f"<h3>Nodes</h3>{_table(nodes) or '<p>no nodes</p>'}"
        f"<h3>Masters, failovers and commits</h3>{figs}"
        f"<h4>Largest failover gaps</h4>{_table(gaps) or '<p>none</p>'}"
        f"<h3>Lag</h3>{lag or '<p>no applied events</p>'}</section>"
    )


def _resets_table(resets: list[dict[str, Any]], stats: dict[str, Any]) -> str:
    if not resets:
        return "<p>none</p>"
    note = (
        "<p class='bad'>A node's coordination state was changed offline: an unsafe_bootstrap may have lost writes "
        "that the lost nodes acknowledged. The audit judges each node's history across a reset as a new epoch.</p>"
    )
    cols = ["node", "type", "time (UTC)", "seq", "previous_cluster_uuid", "cluster_uuid"]
    rows = [
        {
            **{c: r[c] for c in cols},
            "node": _label(stats, r["node"]),
            "(term, version) before": tuple(r["previous_term_version"]),
            "(term, version) after": tuple(r["term_version"]),
        }
        for r in resets
    ]
    return note + _table(rows)


def render_html(report: dict[str, Any], charts: dict[str, dict[str, str]]) -> str:
    stats = report["stats"]
    verdict = "OK: no violations" if report["ok"] else "VIOLATIONS FOUND"
    counts = _table(
        [
            {"invariant": k, "violations": v, "": "ok" if v == 0 else "VIOLATED"}
            for k, v in stats.get("violation_counts", {}).items()
        ],
        cls="inv",
    )
    items = []
    for v in report["violations"]:
        items.append(
            f"<div class='v'><b>{html.escape(v['invariant'])}</b>: {html.escape(v['detail'])}"
            f"{_example_table(v['invariant'], v['examples'], stats)}</div>"
        )
    rng = stats.get("time_range", {})
    clusters = list(charts) or stats.get("clusters", [])
    nav = (
        "<p>Clusters: " + " · ".join(f"<a href='#c-{html.escape(c)}'>{html.escape(c)}</a>" for c in clusters) + "</p>"
        if len(clusters) > 1
        else ""
    )
    sections = "".join(_cluster_section(c, stats, charts.get(c, {})) for c in clusters)
    lat = stats.get("commit_latencies", {})
    gaps = stats.get("failover_gaps", {})
    figures = _table(
        [
            {
                "terms": stats.get("terms", {}).get("count"),
                "elections": stats.get("elections", {}).get("count"),
                "failovers": gaps.get("count"),
                "failover gap p50 / p90 / p99 / max (s)": f"{gaps.get('p50_s')} / {gaps.get('p90_s')} / "
                f"{gaps.get('p99_s')} / {gaps.get('max_s')}",
                "commits": lat.get("count"),
                "commit latency p50 / p90 / p99 / max (ms)": f"{lat.get('p50_ms')} / {lat.get('p90_ms')} / "
                f"{lat.get('p99_ms')} / {lat.get('max_ms')}",
            }
        ]
    )
    truncated = stats.get("input", {}).get("truncated_lines", [])
    summary = {k: stats[k] for k in ("terms", "elections", "failover_gaps", "commit_latencies") if k in stats}
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>coordinated audit report</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 1200px; color: #222; }}
table {{ border-collapse: collapse; margin: .5em 0; font-size: 85%; }}
td, th {{ border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; }}
th {{ background: #f2f2f2; }}
table.ex td {{ max-width: 22em; overflow-wrap: anywhere; }}
.ok {{ color: #080; }} .bad {{ color: #b00; }} .v {{ margin: 1em 0; padding: .5em; border-left: 4px solid #b00; }}
section {{ border-top: 2px solid #ddd; margin-top: 2em; }}
img {{ max-width: 100%; }}
pre {{ background: #f6f6f6; padding: .5em; }}
</style></head><body>
<h1 class="{"ok" if report["ok"] else "bad"}">{verdict}</h1>
<p>{report["events"]:,} events from {report["nodes"]} nodes in {len(stats.get("clusters", []))} cluster(s),
{utc_text(rng.get("first_ts"))} to {utc_text(rng.get("last_ts"))} (UTC);
{report["malformed_lines"]} malformed lines skipped; {len(truncated)} crash-cut last lines noted.</p>
{_missing_note(report.get("missing_histories", []))}
{nav}
<h2>Invariants</h2>{counts}
<h2>Violations</h2>{"".join(items) or "<p>none</p>"}
<h2>Operator resets (coordinated node-tool)</h2>{_resets_table(report.get("resets", []), stats)}
<h2>Nodes without a history in the input</h2>{_missing_table(report.get("missing_histories", []))}
<h2>Figures</h2>{figures}
{sections}
<h2>Crash-cut last lines</h2>{_table(truncated) or "<p>none</p>"}
<details><summary>Statistics (JSON)</summary><pre>{html.escape(json.dumps(summary, indent=2, default=str))}</pre></details>
</body></html>
"""
