"""Where a node's history starts on purpose, and what the audit then cannot judge.

A node's retention deletes its oldest segments and first records a `retention_cut` event: the seqs below its
`first_kept_seq` may be missing, and `history-gap` does not report holes that lie wholly below it (a hole
that reaches up to it or beyond is still a gap: the kept history lost something). An incremental audit's
checkpoint carries a few old events of each node for context (`checkpoint`); holes below the first new seq
are not gaps either.

A trimmed history also lacks evidence about old states: the master's `committed` event of a state that a
follower applied, a quorum member's `accepted` event, a committed state between two others. So when an
input holds a node whose history was trimmed (a hole below its cut was passed over), the checks that need
another node's event (`applied-only-committed`, the members' part of `commit-quorum`, `committed-chain`'s
descent) leave out the cluster's states up to the newest accepted (term, version) that a trimmed node's cut
names (its `marks_accepted`: what that node had accepted when it deleted its segments). The report says so
(`stats.input.horizon`). Every check that needs only the events present (`unique-state-per-version`,
`one-master-per-term`, `node-monotonic`, the rest of `commit-quorum`) still judges every state.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import reduce

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F

from coordinated.audit.reading import RETENTION_CUT, Scout
from coordinated.audit.schema import UNBOOTSTRAPPED

NodeKey = tuple[str, str]  # (cluster UUID, node id)


@dataclass(frozen=True)
class CutEvent:
    cluster: str
    node: str
    first_kept_seq: int
    marks_accepted: tuple[int, int]


def _cut(r: Row) -> CutEvent:
    marks = r["marks_accepted"] or []
    term, version = (int(marks[0]), int(marks[1])) if len(marks) == 2 else (0, 0)
    return CutEvent(r["cluster_uuid"], r["node"], int(r["first_kept_seq"] or 0), (term, version))


def cut_events(events: DataFrame, scout: Scout) -> list[CutEvent]:
    """The input's `retention_cut` events: scouted by the first pass, or (past the scout's limit) the newest of
    each node's, in a job of its own."""
    if scout.cuts is not None:
        return [_cut(r) for r in scout.cuts]
    rows = (
        events.filter(F.col("type") == RETENTION_CUT)
        .groupBy("cluster_uuid", "node")
        .agg(
            F.max("first_kept_seq").alias("first_kept_seq"),
            F.max(F.transform("marks_accepted", lambda m: m.cast("long"))).alias("marks_accepted"),
        )
        .collect()
    )
    return [_cut(r) for r in rows]


@dataclass
class Horizon:
    cut_from: dict[NodeKey, int] = field(default_factory=dict)  # holes below: deleted by retention
    checkpoint_from: dict[NodeKey, int] = field(default_factory=dict)  # holes below: events not carried
    cut_marks: dict[NodeKey, tuple[int, int]] = field(default_factory=dict)
    trimmed: set[NodeKey] = field(default_factory=set)  # nodes whose history lacks seqs below their cut
    # Per cluster: the oldest version an incremental audit's checkpoint carries states of (see `checkpoint`).
    version_floor: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, cuts: Iterable[CutEvent]) -> Horizon:
        horizon = cls()
        for cut in cuts:
            key = (cut.cluster, cut.node)
            horizon.cut_from[key] = max(horizon.cut_from.get(key, 0), cut.first_kept_seq)
            horizon.cut_marks[key] = max(horizon.cut_marks.get(key, (0, 0)), cut.marks_accepted)
        return horizon

    def seq_column(self, which: dict[NodeKey, int]) -> Column:
        """Per event: the seq below which its node's holes are not gaps (0: none)."""
        if not which:
            return F.lit(0).cast("long")
        cluster, node = F.col("cluster_uuid"), F.col("node")
        return reduce(
            lambda acc, item: F.when(
                (node == item[0][1]) & ((cluster == item[0][0]) | (cluster == UNBOOTSTRAPPED)), F.lit(item[1])
            ).otherwise(acc),
            sorted(which.items()),
            F.lit(0),
        ).cast("long")

    def by_cluster(self) -> dict[str, tuple[int, int]]:
        """Per cluster: the newest (term, version) whose evidence may be gone from some node's history."""
        out: dict[str, tuple[int, int]] = {}
        for key in self.trimmed:
            marks = self.cut_marks.get(key)
            if marks is not None and key[0] != UNBOOTSTRAPPED:
                out[key[0]] = max(out.get(key[0], (0, 0)), marks)
        return out

    def beyond(self, cid: str = "cid", term: str = "term", version: str = "version") -> Column:
        """True for a state newer than its cluster's horizon: every check judges it."""
        limits = self.by_cluster()
        version_of = F.coalesce(F.col(version), F.lit(0))
        within = [
            (F.col(cid) == c) & ((F.col(term) < t) | ((F.col(term) == t) & (version_of <= v)))
            for c, (t, v) in limits.items()
        ]
        within += [(F.col(cid) == c) & (version_of < floor) for c, floor in self.version_floor.items()]
        if not within:
            return F.lit(True)
        return ~reduce(lambda a, b: a | b, within)

    def judges(self, cid: str, term: int, version: int | None) -> bool:
        """`beyond` for one state on the driver."""
        limit = self.by_cluster().get(cid)
        if limit is not None and (term, version or 0) <= limit:
            return False
        return (version or 0) >= self.version_floor.get(cid, 0)

    def describe(self) -> list[dict[str, object]]:
        trimmed = [
            {"cluster": c, "term": t, "version": v, "why": "histories trimmed by retention"}
            for c, (t, v) in sorted(self.by_cluster().items())
        ]
        return trimmed + [
            {"cluster": c, "below_version": floor, "why": "older than the states the checkpoint carries"}
            for c, floor in sorted(self.version_floor.items())
            if floor > 0
        ]
