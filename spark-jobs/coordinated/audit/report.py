"""The report: `audit-report.json` (docs/audit.md fields, exactly) and `audit-report.html`."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from coordinated.audit.schema import INVARIANTS
from coordinated.audit.stats import Stats
from coordinated.audit.violations import CheckResult

JSON_NAME = "audit-report.json"
HTML_NAME = "audit-report.html"


def build(
    *, events: int, nodes: int, malformed_lines: int, results: list[CheckResult], stats: Stats, extra: dict[str, Any]
) -> dict[str, Any]:
    order = {name: i for i, name in enumerate(INVARIANTS)}
    results = sorted(results, key=lambda r: order.get(r.invariant, len(order)))
    summary = dict(stats.summary)
    summary["violation_counts"] = {r.invariant: r.total for r in results}
    summary.update(extra)
    return {
        "ok": all(r.total == 0 for r in results),
        "events": events,
        "nodes": nodes,
        "malformed_lines": malformed_lines,
        "violations": [v.to_json() for r in results for v in r.violations],
        "stats": summary,
    }


def write(report: dict[str, Any], report_dir: Path, charts: dict[str, str] | None) -> tuple[Path, Path | None]:
    report_dir.mkdir(parents=True, exist_ok=True)
    json_path = report_dir / JSON_NAME
    json_path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    html_path = None
    if charts is not None:
        html_path = report_dir / HTML_NAME
        html_path.write_text(render_html(report, charts))
    return json_path, html_path


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    cols = list(rows[0])
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(r.get(c, '')))}</td>" for c in cols) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def render_html(report: dict[str, Any], charts: dict[str, str]) -> str:
    stats = report["stats"]
    verdict = "OK: no violations" if report["ok"] else "VIOLATIONS FOUND"
    counts = _table([{"invariant": k, "violations": v} for k, v in stats.get("violation_counts", {}).items()])
    items = []
    for v in report["violations"]:
        items.append(
            f"<div class='v'><b>{html.escape(v['invariant'])}</b>: {html.escape(v['detail'])}"
            f"{_table(v['examples'])}</div>"
        )
    figures = "".join(
        f"<h3>{html.escape(title)}</h3><img alt='{html.escape(title)}' src='data:image/png;base64,{png}'>"
        for title, png in charts.items()
    )
    summary = {k: stats[k] for k in ("terms", "elections", "failover_gaps", "commit_latencies") if k in stats}
    truncated = stats.get("input", {}).get("truncated_lines", [])
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>coordinated audit report</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 1100px; }}
table {{ border-collapse: collapse; margin: .5em 0; font-size: 90%; }}
td, th {{ border: 1px solid #ccc; padding: 2px 6px; text-align: left; }}
.ok {{ color: #080; }} .bad {{ color: #b00; }} .v {{ margin: 1em 0; }}
pre {{ background: #f6f6f6; padding: .5em; }}
</style></head><body>
<h1 class="{"ok" if report["ok"] else "bad"}">{verdict}</h1>
<p>{report["events"]} events from {report["nodes"]} nodes; {report["malformed_lines"]} malformed lines skipped;
{len(truncated)} truncated last lines noted.</p>
<h2>Invariants</h2>{counts}
<h2>Violations</h2>{"".join(items) or "<p>none</p>"}
<h2>Charts</h2>{figures}
<h2>Statistics</h2><pre>{html.escape(json.dumps(summary, indent=2, default=str))}</pre>
<h2>Lagging nodes</h2>{_table(stats.get("lagging_nodes", [])) or "<p>none</p>"}
<h2>Truncated last lines</h2>{_table(truncated) or "<p>none</p>"}
</body></html>
"""
