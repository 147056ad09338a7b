"""Per-node invariants, from the window pass of `streams.py` (nothing here scans the events again unless
there is a violation to show or an unordered apply to verify).

- history-gap: per node, seq starts at 1 and has no holes and no repeats; a hole the files explain (a
  crash-cut line's, seqs skipped past a damaged segment: `holes`) is not one.
- node-monotonic: the node's term never decreases (over `term`, `elected`, `accepted` and `stepped_down`,
  which all carry the node's current term) and its applied (term, version) strictly increases.
- node-cluster-stable: once a node has committed a state of a cluster UUID (its bootstrap is complete), all
  its later events name that same cluster UUID. Before that a node may still move: a bootstrap that lost the
  race to another node's leaves it free to join the winner's cluster.
- A reset event (`unsafe_bootstrap`, `detached`) starts a new epoch of the node: its term and applied
  (term, version) may start over, and it may move to a new cluster UUID right after it; nowhere else.
- applied-only-committed, the node's part: a node applies a state only after its own `committed` of it.
"""

from __future__ import annotations

from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql import types as T

from coordinated.audit.holes import explained_holes
from coordinated.audit.prepare import Frames
from coordinated.audit.schema import (
    APPLIED_COMMITTED,
    HISTORY_GAP,
    NODE_CLUSTER_STABLE,
    NODE_MONOTONIC,
    RESET_TYPES,
)
from coordinated.audit.streams import Stream
from coordinated.audit.violations import CheckResult, Example, Violation, local_frame, lookup_events


def check(fr: Frames) -> list[CheckResult]:
    np = fr.nodes
    gaps = [
        r
        for r in np.flagged
        if r["gap"] is not None
        and not (r["gap"] == "start" and (r["cluster_uuid"], r["node"], r["seq"]) in np.joined)
        and not (r["gap"] == "gap" and (r["cluster_uuid"], r["node"], r["seq"]) in np.filled)
    ]
    explained = explained_holes(fr.events, gaps, fr.cut_notes)
    gaps = [r for r in gaps if r["gap"] != "gap" or (r["cluster_uuid"], r["node"], r["seq"]) not in explained]
    mono = [r for r in np.flagged if r["term_back"] or r["applied_back"]]
    unordered = _verify_unordered_applies(fr, [r for r in np.flagged if r["unordered_apply"]])
    # Across pieces: a piece that continues another must not start below the term the node had reached. Only
    # the piece's first term counts here: a term going back later inside the piece is the window's to report.
    seams = [
        s
        for s in np.streams
        if s.joined_from is not None
        and not s.first_carried  # judged by the audit that read it
        and s.first_type not in RESET_TYPES  # a reset event starts the node's term over
        and s.first_term is not None
        and s.joined_from.max_term is not None
        and s.first_term < s.joined_from.max_term
    ]
    gaps.sort(key=lambda r: (r["node"], r["cluster_uuid"], r["seq"]))
    mono.sort(key=lambda r: (r["node"], r["cluster_uuid"], r["seq"]))
    refs: set[tuple[str, str, int]] = set()
    for r in gaps[: fr.max_violations]:
        refs.add((r["cluster_uuid"], r["node"], r["seq"]))
        if r["prev_seq"] is not None:
            refs.add((r["cluster_uuid"], r["node"], r["prev_seq"]))
    for r in mono[: fr.max_violations]:
        refs.add((r["cluster_uuid"], r["node"], r["seq"]))
        other = r["max_term_seq"] if r["term_back"] else r["prev_applied"]["seq"]
        refs.add((r["cluster_uuid"], r["node"], other))
    for r in unordered[: fr.max_violations]:
        refs.add((r["cluster_uuid"], r["node"], r["seq"]))
    for prev, nxt in np.moves[: fr.max_violations]:
        refs.add((prev.cluster, prev.node, nxt.first_seq - 1))
        refs.add((nxt.cluster, nxt.node, nxt.first_seq))
    for s in seams[: fr.max_violations]:
        refs.add((s.cluster, s.node, s.first_seq))
    found = lookup_events(fr.events, refs)
    return [
        _gaps(gaps, found, fr.max_violations),
        _monotonic(mono, seams, found, fr.max_violations),
        _moves(np.moves, found, fr.max_violations),
        _unordered(unordered, found, fr.max_violations),
    ]


Found = dict[tuple[str, str, int], list[Example]]


def _pick(found: Found, cluster: str, node: str, seq: int, type_: str | None = None) -> list[Example]:
    events = found.get((cluster, node, seq), [])
    matching = [e for e in events if type_ is None or e["type"] == type_]
    return matching[:1] or events[:1]


def _where(cluster: str) -> str:
    return f"cluster {cluster}: " if cluster else ""


def _gaps(rows: list[Row], found: Found, limit: int) -> CheckResult:
    violations = []
    for r in rows[:limit]:
        c, node, seq = r["cluster_uuid"], r["node"], r["seq"]
        if r["gap"] == "start":
            detail = f"node {node}: history starts at seq {seq}, not 1"
            examples = _pick(found, c, node, seq)
        elif r["gap"] == "reused":
            detail = f"node {node}: seq {seq} is used twice"
            examples = found.get((c, node, seq), [])[:2]
        else:
            missing = seq - r["prev_seq"] - 1
            detail = f"node {node}: seq jumps from {r['prev_seq']} to {seq} ({missing} missing)"
            examples = _pick(found, c, node, r["prev_seq"]) + _pick(found, c, node, seq)
        violations.append(Violation(HISTORY_GAP, _where(c) + detail, examples))
    return CheckResult(HISTORY_GAP, len(rows), violations)


def _monotonic(rows: list[Row], seams: list[Stream], found: Found, limit: int) -> CheckResult:
    violations = []
    for r in rows[:limit]:
        c, node, seq = r["cluster_uuid"], r["node"], r["seq"]
        if r["term_back"]:
            detail = f"node {node}: term goes back from {r['max_term']} to {r['term']} at seq {seq} ({r['type']})"
            examples = _pick(found, c, node, r["max_term_seq"]) + _pick(found, c, node, seq, r["type"])
        else:
            p = r["prev_applied"]
            detail = (
                f"node {node}: applied (term {r['term']}, version {r['version']}) at seq {seq} "
                f"after (term {p['term']}, version {p['version']}) at seq {p['seq']}"
            )
            examples = _pick(found, c, node, p["seq"], "applied") + _pick(found, c, node, seq, "applied")
        violations.append(Violation(NODE_MONOTONIC, _where(c) + detail, examples))
    for s in seams[: max(0, limit - len(violations))]:
        prev = s.joined_from
        assert prev is not None
        detail = (
            f"node {s.node}: term goes back from {prev.max_term} (up to seq {prev.last_seq}, cluster {prev.cluster}) "
            f"to {s.first_term} (from seq {s.first_seq}, cluster {s.cluster})"
        )
        violations.append(Violation(NODE_MONOTONIC, detail, _pick(found, s.cluster, s.node, s.first_seq)))
    return CheckResult(NODE_MONOTONIC, len(rows) + len(seams), violations)


def _moves(moves: list[tuple[Stream, Stream]], found: Found, limit: int) -> CheckResult:
    violations = []
    for prev, nxt in moves[:limit]:
        detail = (
            f"node {nxt.node}: its events move from cluster {prev.cluster} to cluster {nxt.cluster} at seq "
            f"{nxt.first_seq}, after it had committed a state of the first (a node never joins or accepts state "
            "from another cluster UUID after bootstrap)"
        )
        examples = _pick(found, prev.cluster, prev.node, nxt.first_seq - 1) + _pick(
            found, nxt.cluster, nxt.node, nxt.first_seq
        )
        violations.append(Violation(NODE_CLUSTER_STABLE, detail, examples))
    return CheckResult(NODE_CLUSTER_STABLE, len(moves), violations)


def _verify_unordered_applies(fr: Frames, rows: list[Row]) -> list[Row]:
    """The applies that no earlier `committed` event of the same node for the same state precedes (states older
    than the horizon aside: a trimmed history may have lost that commit)."""
    rows = [r for r in rows if fr.horizon.judges(r["cluster_uuid"], r["term"], r["version"])]
    if not rows:
        return []
    schema = T.StructType(
        [
            T.StructField("cluster_uuid", T.StringType()),
            T.StructField("node", T.StringType()),
            T.StructField("state_uuid", T.StringType()),
            T.StructField("_na_origin", T.StringType()),
            T.StructField("applied_seq", T.LongType()),
        ]
    )
    wanted = local_frame(
        fr.spark, [(r["cluster_uuid"], r["node"], r["state_uuid"], r["_na_origin"], r["seq"]) for r in rows], schema
    )
    # A state its master never committed is reported once, by the state check, not again per apply.
    decided = {
        (r["cid"], r["state_uuid"])
        for r in fr.states.filter("committed")
        .join(
            F.broadcast(wanted.select(F.col("cluster_uuid").alias("cid"), "state_uuid").distinct()),
            ["cid", "state_uuid"],
        )
        .select("cid", "state_uuid")
        .collect()
    }
    rows = [r for r in rows if (r["cluster_uuid"], r["state_uuid"]) in decided]
    if not rows:
        return []
    commits = (
        fr.events.filter(F.col("type") == "committed")
        .select("cluster_uuid", "node", "state_uuid", "seq")
        .join(F.broadcast(wanted.drop("_na_origin")), ["cluster_uuid", "node", "state_uuid"])
        .filter(F.col("seq") < F.col("applied_seq"))
        .select("cluster_uuid", "node", "applied_seq")
        .distinct()
        .collect()
    )
    ok = {(r["cluster_uuid"], r["node"], r["applied_seq"]) for r in commits}
    bad = [r for r in rows if (r["cluster_uuid"], r["node"], r["seq"]) not in ok]
    return sorted(bad, key=lambda r: (r["node"], r["cluster_uuid"], r["seq"]))


def _unordered(rows: list[Row], found: Found, limit: int) -> CheckResult:
    violations = []
    for r in rows[:limit]:
        c, node, seq = r["cluster_uuid"], r["node"], r["seq"]
        detail = (
            f"node {node} applied state {r['state_uuid']} (term {r['term']}, version {r['version']}) at seq {seq} "
            "without committing it first (apply comes after the node's own commit)"
        )
        violations.append(Violation(APPLIED_COMMITTED, _where(c) + detail, _pick(found, c, node, seq, "applied")))
    return CheckResult(APPLIED_COMMITTED, len(rows), violations)
