"""One window over every node's events in seq order, and the per-node histories put together on the driver.

The window is partitioned by (cluster_uuid, node), plus the folder for events written before bootstrap
("_na_") and the node's epoch (the number of reset events, `unsafe_bootstrap` or `detached`, so far), so it scales with the number of nodes and never mixes two clusters' nodes that share an id. Each
row is compared with the node's earlier events (running aggregates; the range's own figures over the whole range):

- history-gap: seq starts at 1, has no holes and no repeats;
- node-monotonic: the term of `term`, `elected`, `accepted` and `stepped_down` events never decreases, and
  the applied (term, version) strictly increases;
- applied-only-committed (the node's part): an `applied` event that does not follow the node's own
  `committed` of that state is a candidate, verified exactly afterwards;
- per-node figures for the report, read off each partition's last row.

A reset event (written offline by `coordinated node-tool`) starts a new epoch, so the node's term and applied
(term, version) may start over after it, and only after it.

Only flagged rows, each partition's last row, the `elected`/`stepped_down` and the reset events reach the
driver.
`stitch` then joins a node's pieces: its "_na_" prefix continues in the cluster it bootstrapped into (its
home), and a bootstrapped node whose history continues under another cluster UUID is a `node-cluster-stable`
violation rather than a gap, unless a reset event comes right before the move.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame, Row, Window
from pyspark.sql import functions as F

from coordinated.audit.horizon import Horizon
from coordinated.audit.reading import CARRIED, folder_of
from coordinated.audit.schema import RESET_TYPES, UNBOOTSTRAPPED

TERM_TYPES = ("term", "elected", "accepted", "stepped_down")
NODE_PARTITION = ("cluster_uuid", "node", "_na_origin")
PARTITION = (*NODE_PARTITION, "_epoch")
RESET_COLUMNS = ("previous_cluster_uuid", "previous_term", "previous_version", "current_term")
# The events that commit their state on the node itself: its own reset event commits it (see the state table).
COMMIT_TYPES = ("committed", *RESET_TYPES)


@dataclass
class Stream:
    """One partition of the window: a node's events under one cluster UUID (or before bootstrap)."""

    cluster: str
    node: str
    origin: str  # the folder of the partition's first event
    events: int
    first_seq: int
    last_seq: int
    first_ts: float | None
    last_ts: float | None
    elections: int
    applied: int
    committed: int  # `committed` events: once a node has one, its cluster UUID is settled
    first_type: str  # the type of the piece's first event: a reset event starts a new epoch
    first_carried: bool  # the piece starts with an event carried from an incremental audit's checkpoint
    min_term: int | None  # of the term-carrying events
    max_term: int | None
    first_term: int | None  # the term of the piece's first term-carrying event (where it meets the piece before)
    home: str = ""  # the cluster this piece belongs to (its own, or where an "_na_" prefix continues)
    joined_from: Stream | None = None  # the piece this one continues (same node, seq right before)


@dataclass
class NodeHistory:
    """A node's history as a person sees it: its pieces, in seq order, under its home cluster."""

    cluster: str
    node: str
    pieces: list[Stream] = field(default_factory=list)

    def figure(self, key: str) -> Any:
        return sum(getattr(p, key) for p in self.pieces)


@dataclass
class NodePass:
    flagged: list[Row]  # rows with a gap, a term or applied going back, or an unordered apply
    streams: list[Stream]
    elections: list[Row]  # elected events: cluster_uuid, node, term, ts, seq, _na_origin
    stepdowns: list[Row]
    resets: list[Row] = field(default_factory=list)  # unsafe_bootstrap and detached events, with RESET_COLUMNS
    lag_rows: list[Row] = field(default_factory=list)  # a node's last event in each time bin: max_applied so far
    histories: list[NodeHistory] = field(default_factory=list)
    # (cluster, node, seq) of a piece's first event whose "start" is explained by the piece before it
    joined: set[tuple[str, str, int]] = field(default_factory=set)
    moves: list[tuple[Stream, Stream]] = field(default_factory=list)  # (from, to): cluster changes
    # (cluster, node, seq) of a hole in one piece filled exactly by a piece under another cluster UUID
    filled: set[tuple[str, str, int]] = field(default_factory=set)

    def home_of(self, cluster: str, node: str, origin: str | None) -> str:
        """The cluster an event of (cluster_uuid, node, folder) belongs to."""
        if cluster != UNBOOTSTRAPPED:
            return cluster
        for s in self.streams:
            if s.cluster == cluster and s.node == node and s.origin == origin:
                return s.home
        return UNBOOTSTRAPPED

    def present(self) -> dict[str, set[str]]:
        """Per cluster: the nodes whose history is in the input."""
        out: dict[str, set[str]] = defaultdict(set)
        for s in self.streams:
            out[s.home].add(s.node)
            out[s.cluster].add(s.node)
        return out


CHUNK = 1 << 14  # seqs per window partition: a node's history spreads over many tasks


def epoch_of(resets: list[Row]) -> Column:
    """The number of the node's reset events up to each row, from the scouted reset events (a few)."""
    if not resets:
        return F.lit(0).cast("long")
    na_origin = F.col("_na_origin")
    return reduce(
        lambda a, b: a + b,
        [
            F.when(
                (F.col("cluster_uuid") == r["cluster_uuid"])
                & (F.col("node") == r["node"])
                & (na_origin == (r["_origin"] if r["cluster_uuid"] == UNBOOTSTRAPPED else ""))
                & (F.col("seq") >= r["seq"]),
                1,
            ).otherwise(0)
            for r in resets
        ],
    ).cast("long")


def windowed(
    events: DataFrame,
    t0: float = 0.0,
    width: float = 1.0,
    bins: int = 1,
    *,
    resets: list[Row] | None = None,
    chunk: int | None = CHUNK,
    horizon: Horizon | None = None,
) -> DataFrame:
    """The window's rows. Each node's history is cut into seq ranges of `chunk` (None: one range), each a
    partition of its own; `merge_chunks` joins the ranges again on the driver. `resets` (scouted) gives the
    epochs without a window of their own; None: the window counts them."""
    na_origin = F.when(F.col("cluster_uuid") == UNBOOTSTRAPPED, F.col("_origin")).otherwise(F.lit(""))
    horizon = horizon or Horizon()
    carried = F.col(CARRIED) if CARRIED in events.columns else F.lit(False)
    ev = events.select(
        "cluster_uuid", "node", "seq", "ts", "type", "term", "version", "state_uuid", "_source", *RESET_COLUMNS,
        carried.alias(CARRIED),
        na_origin.alias("_na_origin"),
        (F.floor(F.col("seq") / F.lit(chunk)) if chunk else F.lit(0)).cast("long").alias("_chunk"),
        # Holes below these seqs are not gaps (see `horizon`): deleted by retention, or not carried.
        horizon.seq_column(horizon.cut_from).alias("_cut_from"),
        horizon.seq_column(horizon.checkpoint_from).alias("_ckpt_from"),
    )  # fmt: skip
    if resets is not None:
        ev = ev.withColumn("_epoch", epoch_of(resets))
    else:
        # The epoch window keeps the first's hash partitioning (a superset of its keys): one more sort, no shuffle.
        ev = ev.withColumn(
            "_epoch",
            F.sum(F.col("type").isin(*RESET_TYPES).cast("long")).over(
                Window.partitionBy(*NODE_PARTITION).orderBy("seq").rowsBetween(Window.unboundedPreceding, 0)
            ),
        )
    by_seq = Window.partitionBy(*PARTITION, "_chunk").orderBy("seq")
    before = by_seq.rowsBetween(Window.unboundedPreceding, -1)
    upto = by_seq.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    # The range's figures are read off its last row only: a whole-range frame computes them once per range,
    # where a running frame would evaluate them again for every row. Each is still written into every row, so
    # what the range's first and last rows tell by themselves is read off them instead (`range_figures`).
    whole = by_seq.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    typ = F.col("type")
    is_term = typ.isin(*TERM_TYPES)
    term_of = F.when(is_term, F.col("term"))
    is_applied = typ == "applied"
    applied = F.when(is_applied, F.struct("term", "version", "seq"))
    is_commit = typ.isin(*COMMIT_TYPES)
    new = ~F.col(CARRIED)  # the figures count an incremental audit's new events only
    time_bin = F.greatest(F.lit(0), F.least(F.floor((F.col("ts") - F.lit(t0)) / F.lit(width)), F.lit(bins - 1))).cast(
        "int"
    )
    return ev.select(
        "*",
        time_bin.alias("bin"),
        F.lead(time_bin).over(by_seq).alias("next_bin"),
        F.max(F.when(is_applied, F.col("version"))).over(upto).alias("max_applied"),
        F.lag("seq").over(by_seq).alias("prev_seq"),
        F.lead("seq").over(by_seq).isNull().alias("last"),
        F.max(term_of).over(before).alias("max_term"),
        F.max_by(F.when(is_term, F.col("seq")), term_of).over(before).alias("max_term_seq"),
        F.last(applied, ignorenulls=True).over(before).alias("prev_applied"),
        # The node's own reset event commits its state for it (see the state table).
        F.last(F.when(is_commit, F.col("state_uuid")), ignorenulls=True).over(before).alias("last_commit"),
        F.sum(new.cast("long")).over(whole).alias("n"),
        F.min("ts").over(whole).alias("first_ts"),
        F.max("ts").over(whole).alias("last_ts"),
        F.sum(((typ == "elected") & new).cast("long")).over(whole).alias("n_elected"),
        F.sum((is_applied & new).cast("long")).over(whole).alias("n_applied"),
        # Not only new ones: a commit settles the node's cluster (`_settled`), carried or not.
        F.sum((typ == "committed").cast("long")).over(whole).alias("n_committed"),
        F.min(term_of).over(whole).alias("min_term_all"),
        F.first(term_of, ignorenulls=True).over(whole).alias("first_term"),
        F.max(term_of).over(whole).alias("max_term_all"),
        # What the next seq range of the node needs from this one (read off the range's last row).
        F.first(applied, ignorenulls=True).over(whole).alias("first_applied"),
    )


def _kept_rows(
    events: DataFrame,
    t0: float,
    width: float,
    bins: int,
    resets: list[Row] | None,
    chunk: int | None,
    horizon: Horizon | None = None,
) -> list[Row]:
    w = windowed(events, t0, width, bins, resets=resets, chunk=chunk, horizon=horizon)
    typ = F.col("type")
    prev_seq = F.col("prev_seq")
    seq = F.col("seq")
    # A hole whose seqs all lie below the node's horizon is not a gap; one below its retention cut only (not
    # merely before a checkpoint) shows that the node's history was trimmed (`_trimmed`).
    explained = seq <= F.greatest("_cut_from", "_ckpt_from")
    gap = (
        F.when(prev_seq.isNull() & (seq != 1) & ~explained, F.lit("start"))
        .when(seq == prev_seq, F.lit("reused"))
        .when((seq > prev_seq + 1) & ~explained, F.lit("gap"))
    )
    hole = (prev_seq.isNull() & (seq != 1)) | (seq > prev_seq + 1)
    trimmed = hole & (seq <= F.col("_cut_from")) & (seq > F.col("_ckpt_from"))
    new = ~F.col(CARRIED)  # carried events are context: they were judged by the audit that read them
    pa = F.col("prev_applied")
    is_applied = typ == "applied"
    applied_back = is_applied & (
        (F.col("term") < pa.term) | ((F.col("term") == pa.term) & (F.col("version") <= pa.version))
    )
    flagged = w.select(
        "*",
        F.when(new, gap).alias("gap"),
        F.coalesce(trimmed & new, F.lit(False)).alias("_trimmed"),
        F.coalesce(typ.isin(*TERM_TYPES) & (F.col("term") < F.col("max_term")) & new, F.lit(False)).alias("term_back"),
        F.coalesce(applied_back & new, F.lit(False)).alias("applied_back"),
        (is_applied & ~F.col("state_uuid").eqNullSafe(F.col("last_commit")) & new).alias("unordered_apply"),
    )
    keep = (
        F.col("gap").isNotNull()
        | F.col("_trimmed")
        | F.col("term_back")
        | F.col("applied_back")
        | F.col("unordered_apply")
        | F.col("last")
        | ~F.col("bin").eqNullSafe(F.col("next_bin"))
        | typ.isin("elected", "stepped_down", *RESET_TYPES)
        | F.col("prev_seq").isNull()  # the range's first row: its seq, type and file are the range's
    )
    # The file, not its folder (a string function per row, costly at this scale): `folder` on the driver.
    first_file = F.when(F.col("prev_seq").isNull(), F.col("_source")).alias("_source")
    return flagged.filter(keep).select(*[first_file if c == "_source" else c for c in flagged.columns]).collect()


def _is_flagged(r: Row) -> bool:
    return r["gap"] is not None or bool(r["term_back"] or r["applied_back"] or r["unordered_apply"])


def _after(a: Row | None, b: Row | None) -> bool:
    """Whether applied (term, version) `a` comes strictly after `b` (or there is nothing to compare)."""
    return a is None or b is None or (a["term"], a["version"]) > (b["term"], b["version"])


def merge_chunks(rows: list[Row]) -> tuple[list[Row], list[Row], set[tuple[str, str]]]:
    """Join the seq ranges of each window partition again: (the rows, the partitions' last rows as one per
    partition, the (cluster, node)s whose ranges do not join exactly).

    A range's first row was judged without the ranges before it. Its seq is compared with the previous range's
    last, and an apply before the range's first commit with the last commit before it: both exact. A term or
    an applied (term, version) that goes back right at a range's start would make every later row of the range
    need the earlier ranges' maximum; those (rare: a violation) nodes are recomputed without ranges.
    """
    groups: dict[tuple[Any, ...], dict[int, Row]] = defaultdict(dict)
    firsts = {_range_of(r): r for r in rows if r["prev_seq"] is None}
    for r in rows:
        if r["last"]:
            groups[(r["cluster_uuid"], r["node"], r["_na_origin"], r["_epoch"])][r["_chunk"]] = range_figures(
                r, firsts[_range_of(r)]
            )
    fixes: dict[tuple[Any, ...], dict[str, Any]] = {}  # (group..., chunk) -> carried values
    lasts: list[Row] = []
    redo: set[tuple[str, str]] = set()
    for key, by_chunk in groups.items():
        order = sorted(by_chunk)
        merged = by_chunk[order[0]].asDict()
        for chunk in order[1:]:
            cur = by_chunk[chunk]
            carry = dict(merged)
            fixes[(*key, chunk)] = carry
            term_back = _pick_max(carry["max_term_all"], cur["first_term"]) != cur["first_term"]
            if term_back or not _after(cur["first_applied"], carry["last_applied"]):
                redo.add((key[0], key[1]))
            merged.update(
                seq=cur["seq"],
                n=carry["n"] + cur["n"],
                first_ts=_pick_min(carry["first_ts"], cur["first_ts"]),
                last_ts=_pick_max(carry["last_ts"], cur["last_ts"]),
                n_elected=carry["n_elected"] + cur["n_elected"],
                n_applied=carry["n_applied"] + cur["n_applied"],
                n_committed=carry["n_committed"] + cur["n_committed"],
                min_term_all=_pick_min(carry["min_term_all"], cur["min_term_all"]),
                max_term_all=_pick_max(carry["max_term_all"], cur["max_term_all"]),
                first_term=carry["first_term"] if carry["first_term"] is not None else cur["first_term"],
                first_applied=carry["first_applied"] or cur["first_applied"],
                last_applied=cur["last_applied"] or carry["last_applied"],
                last_commit_upto=cur["last_commit_upto"] or carry["last_commit_upto"],
            )
        lasts.append(Row(**merged))
    out: list[Row] = []
    for r in rows:
        before = fixes.get((r["cluster_uuid"], r["node"], r["_na_origin"], r["_epoch"], r["_chunk"]))
        starts = r["gap"] == "start" and r["prev_seq"] is None  # the range's first row
        early = r["unordered_apply"] and r["last_commit"] is None  # an apply before the range's first commit
        if before is None or not (starts or early):
            out.append(r)
            continue
        d = r.asDict()
        if starts:
            d["prev_seq"] = before["seq"]
            hole = d["seq"] > before["seq"] + 1 and not d[CARRIED]
            explained = d["seq"] <= max(d["_cut_from"], d["_ckpt_from"])
            d["gap"] = "gap" if hole and not explained else None
            d["_trimmed"] = hole and d["_ckpt_from"] < d["seq"] <= d["_cut_from"]
        if early:
            d["last_commit"] = before["last_commit_upto"]
            d["unordered_apply"] = d["state_uuid"] != d["last_commit"] and not d[CARRIED]
        out.append(Row(**d))
    return out, lasts, redo


def _range_of(r: Row) -> tuple[Any, ...]:
    return (r["cluster_uuid"], r["node"], r["_na_origin"], r["_epoch"], r["_chunk"])


def range_figures(last: Row, first: Row) -> Row:
    """A range's last row with the figures its own fields and its range's first row give: the first seq,
    type and file; the last applied (term, version, seq) and the last committed state up to the end."""
    d = last.asDict()
    commits = d["type"] in COMMIT_TYPES and d["state_uuid"] is not None
    d.update(
        first_seq=first["seq"],
        first_type=first["type"],
        first_source=first["_source"],
        first_carried=first[CARRIED],
        last_applied=Row(term=d["term"], version=d["version"], seq=d["seq"])
        if d["type"] == "applied"
        else d["prev_applied"],
        last_commit_upto=d["state_uuid"] if commits else d["last_commit"],
    )
    return Row(**d)


def _pick_min(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else min(a, b)


def _pick_max(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)


def node_pass(
    events: DataFrame,
    t0: float = 0.0,
    width: float = 1.0,
    bins: int = 1,
    *,
    resets: list[Row] | None = None,
    chunk: int | None = CHUNK,
    folder: Callable[[str], str] = folder_of,
    horizon: Horizon | None = None,
) -> NodePass:
    """The window pass; `t0`, `width` and `bins` place each node's last event per time bin (for the lag).
    `folder` gives a file's `_origin` (the events' own column, computed for a piece's first file only)."""
    rows, lasts, redo = merge_chunks(_kept_rows(events, t0, width, bins, resets, chunk, horizon))
    if redo:
        again = reduce(lambda a, b: a | b, [(F.col("cluster_uuid") == c) & (F.col("node") == n) for c, n in redo])
        rows = [r for r in rows if (r["cluster_uuid"], r["node"]) not in redo]
        lasts = [r for r in lasts if (r["cluster_uuid"], r["node"]) not in redo]
        more, more_lasts, _ = merge_chunks(_kept_rows(events.filter(again), t0, width, bins, resets, None, horizon))
        rows += more
        lasts += more_lasts
    if horizon is not None:
        horizon.trimmed.update((r["cluster_uuid"], r["node"]) for r in rows if r["_trimmed"])
    result = NodePass(
        flagged=[r for r in rows if _is_flagged(r)],
        streams=[
            Stream(
                cluster=r["cluster_uuid"],
                node=r["node"],
                origin=folder(r["first_source"]),
                events=int(r["n"]),
                first_seq=int(r["first_seq"]),
                last_seq=int(r["seq"]),
                first_ts=r["first_ts"],
                last_ts=r["last_ts"],
                elections=int(r["n_elected"]),
                applied=int(r["n_applied"]),
                committed=int(r["n_committed"]),
                first_type=r["first_type"],
                first_carried=bool(r["first_carried"]),
                min_term=r["min_term_all"],
                max_term=r["max_term_all"],
                first_term=r["first_term"],
            )
            for r in lasts
        ],
        elections=[r for r in rows if r["type"] == "elected"],
        stepdowns=[r for r in rows if r["type"] == "stepped_down"],
        resets=sorted((r for r in rows if r["type"] in RESET_TYPES), key=lambda r: (r["ts"] or 0.0, r["node"])),
        lag_rows=[
            r for r in rows if r["bin"] is not None and r["bin"] != r["next_bin"] and r["max_applied"] is not None
        ],
    )
    stitch(result)
    return result


def stitch(np: NodePass) -> None:
    """Join each node's pieces: a piece whose first seq follows right after another piece of the same node.

    An "_na_" piece continued by a bootstrapped piece takes that piece's cluster as its home. A piece whose
    node had already committed a state of its cluster, continued under another cluster UUID, is a move
    (`node-cluster-stable`); the node's history stays one, under the cluster it settled in. A reset event
    right before unsettles the node: the piece it starts is not a move (unsafe-bootstrap), nor is the move
    after a piece it starts (detach-cluster), until the node commits again.
    """
    holes: dict[str, list[Row]] = defaultdict(list)
    for r in np.flagged:
        if r["gap"] == "gap":
            holes[r["node"]].append(r)
    by_node: dict[str, list[Stream]] = defaultdict(list)
    for s in np.streams:
        by_node[s.node].append(s)
    for pieces in by_node.values():
        pieces.sort(key=lambda s: (s.first_seq, s.cluster == UNBOOTSTRAPPED, s.cluster))
        ends: dict[int, list[Stream]] = defaultdict(list)
        for s in pieces:
            ends[s.last_seq].append(s)
        for s in pieces:
            if s.first_seq <= 1:
                continue
            before = [p for p in ends.get(s.first_seq - 1, []) if p is not s and p.joined_from is not s]
            if not before:
                continue
            # Prefer the piece from the same folder (two clusters' nodes may share an id and a boundary).
            before.sort(key=lambda p: (p.origin != s.origin, p.cluster))
            prev = before[0]
            s.joined_from = prev
            np.joined.add((s.cluster, s.node, s.first_seq))
            reset = s.first_type in RESET_TYPES
            moved = prev.cluster != UNBOOTSTRAPPED and s.cluster != prev.cluster and not reset
            if moved and _settled(prev) and not s.first_carried:
                np.moves.append((prev, s))
        # A node that moved to another cluster and back: the other cluster's piece fills a hole in this one.
        spans = {(p.first_seq, p.last_seq): p for p in pieces}
        for r in holes.get(pieces[0].node, []):
            inner = spans.get((r["prev_seq"] + 1, r["seq"] - 1))
            if inner is not None and inner.cluster not in (r["cluster_uuid"], UNBOOTSTRAPPED):
                outer = next(p for p in pieces if p.cluster == r["cluster_uuid"] and p.first_seq <= r["prev_seq"])
                inner.joined_from = inner.joined_from or outer
                np.joined.add((inner.cluster, inner.node, inner.first_seq))
                np.filled.add((r["cluster_uuid"], r["node"], r["seq"]))
                if _settled(outer):
                    np.moves.append((outer, inner))
        for s in pieces:
            root = s
            seen = {id(root)}
            while root.joined_from is not None and id(root.joined_from) not in seen:
                root = root.joined_from
                seen.add(id(root))
            s.home = _home(root, pieces)
    histories: dict[tuple[str, str, str], NodeHistory] = {}
    for s in sorted(np.streams, key=lambda s: (s.node, s.first_seq)):
        root = s
        while root.joined_from is not None and root.joined_from is not s:
            root = root.joined_from
        key = (s.home, s.node, f"{root.cluster}/{root.origin}/{root.first_seq}")
        histories.setdefault(key, NodeHistory(s.home, s.node)).pieces.append(s)
    np.histories = sorted(histories.values(), key=lambda h: (h.cluster, h.node))


def _settled(piece: Stream) -> bool:
    """Whether the node had committed a state of `piece`'s cluster by the piece's end (then its cluster UUID is
    fixed: before that, a bootstrap that lost the race leaves the node free to join the winner's cluster)."""
    cur: Stream | None = piece
    seen: set[int] = set()
    while cur is not None and id(cur) not in seen and cur.cluster == piece.cluster:
        seen.add(id(cur))
        if cur.committed:
            return True
        if cur.first_type in RESET_TYPES:  # commits before the reset do not bind the node any more
            return False
        cur = cur.joined_from
    return False


def _home(root: Stream, pieces: list[Stream]) -> str:
    """The cluster the node's history settles in (its first committed state's), following the pieces that
    continue `root`; else the first cluster UUID it names."""
    chain: list[Stream] = []
    cur: Stream | None = root
    while cur is not None and all(cur is not c for c in chain):
        chain.append(cur)
        cur = next((p for p in pieces if p.joined_from is cur), None)
    named = [c for c in chain if c.cluster != UNBOOTSTRAPPED]
    settled = [c for c in named if c.committed]
    return (settled or named or [root])[0].cluster if named else UNBOOTSTRAPPED
