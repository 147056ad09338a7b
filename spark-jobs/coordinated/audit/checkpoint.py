"""The incremental audit: `coordinated audit SOURCE... --checkpoint PATH` (docs/audit.md, "Incremental audits").

A checkpoint is what one audit leaves for the next, so that the next reads only what is newer and still
catches a violation whose events lie on both sides of the boundary. It is a JSON document:

- `format` (1), `release` (the release that wrote it, from 0.2.0 on) and `written` (UTC); a checkpoint of a newer
  format is refused as unusable input (exit 2), naming its format and the release that wrote it;
- `nodes`: per node, the folder its events came from, the last seq, term and applied state the audit saw, and
  whether its history was trimmed by retention;
- `chain_tips`: per cluster, the newest committed state (the committed chain's tip);
- `window`: per cluster, the oldest version whose states are carried (see below);
- `events`: the events carried into the next audit, in the history's own schema.

The carried events are the few old events the checks need to judge new ones: per node its last event, the
event with its newest term, its last applied state and its last commit (since its last reset, if any), its
reset events and its newest `retention_cut`; per cluster one event of every state in the last
`CARRY_VERSIONS` versions below the tip (the master's `committed` where there is one, the `settings_removed`
of a node's copy rewritten offline), every `accepted` event of those states no master has committed yet (a
commit after the boundary is judged against them), and the `elected` events of their terms. The next audit reads them with its new events: holes below each node's
first new seq are not gaps, and a state, term or node is judged only where at least one of its events is new
(a violation among carried events alone was reported by the audit that read them). States older than the
carried window that a new event names are outside the horizon (`horizon`), like states a retention cut
trimmed. So a chain of incremental audits gives the verdicts of one audit of everything, as long as no new
event refers to a state more than `CARRY_VERSIONS` versions behind the tip at the checkpoint.

Segment files of the real layout (`segment-N...`, N its first seq) that end before a node's last seq are
not read at all, so an incremental audit reads the new segments and at most one older one per node.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from coordinated.audit.horizon import Horizon
from coordinated.audit.reading import CARRIED, Input, UnusableInput, merged_scouts, scout
from coordinated.audit.schema import (
    EVENT_COLUMNS,
    EVENT_SCHEMA,
    NODE_NAME_COLUMN,
    RESET_TYPES,
    SETTINGS_REMOVED,
    STATE_TYPES,
)
from coordinated.audit.segments import as_spark_names
from coordinated.audit.violations import local_frame
from coordinated.coordination.formats import newer_format_problem
from coordinated.release import installed_release

FORMAT = 1
CARRY_VERSIONS = 10_000
TERM_TYPES = ("term", "elected", "accepted", "stepped_down")
COMMIT_TYPES = ("committed", *RESET_TYPES)
CONTEXT_COLUMNS = (*EVENT_COLUMNS, NODE_NAME_COLUMN, "_source", "_origin")
_SEGMENT = re.compile(r"segment-(\d+)\.jsonl(?:\.\w+)?$")


@dataclass
class NodeMark:
    cluster: str
    node: str
    origin: str  # the folder (or URL) its events came from
    last_seq: int
    term: int | None
    applied: tuple[int, int] | None
    trimmed: bool = False


@dataclass
class Checkpoint:
    nodes: list[NodeMark] = field(default_factory=list)
    chain_tips: dict[str, dict[str, Any]] = field(default_factory=dict)
    window: dict[str, int] = field(default_factory=dict)  # cluster -> the oldest version whose states are carried
    events: list[dict[str, Any]] = field(default_factory=list)

    # -- the file --------------------------------------------------------------------------------------------

    @classmethod
    def read(cls, path: Path) -> Checkpoint | None:
        """The checkpoint at `path`, None when there is none yet; UnusableInput when it cannot be used."""
        if not path.exists():
            return None
        try:
            text = path.read_text()
        except OSError as error:
            raise UnusableInput(f"cannot read the checkpoint {path}: {error}") from None
        return cls.parse(text, str(path))

    @classmethod
    def parse(cls, text: str, path: str) -> Checkpoint:
        """A checkpoint's document (read from `path`, a file or an object); UnusableInput when it cannot be used."""
        try:
            doc = json.loads(text)
            if not isinstance(doc, dict) or doc.get("format") != FORMAT:
                found = doc.get("format") if isinstance(doc, dict) else None
                writer = doc.get("release") if isinstance(doc, dict) and isinstance(doc.get("release"), str) else None
                newer = newer_format_problem(f"checkpoint {path}", found, FORMAT, installed_release(), writer)
                raise UnusableInput(
                    newer or f"checkpoint {path} has format {found!r}; this release reads format {FORMAT}"
                )
            return cls(
                nodes=[
                    NodeMark(
                        n["cluster"],
                        n["node"],
                        n["origin"],
                        int(n["last_seq"]),
                        n.get("term"),
                        tuple(n["applied"][:2]) if n.get("applied") else None,
                        bool(n.get("trimmed")),
                    )
                    for n in doc["nodes"]
                ],
                chain_tips=dict(doc.get("chain_tips", {})),
                window={c: int(v) for c, v in doc.get("window", {}).items()},
                events=list(doc["events"]),
            )
        except (OSError, ValueError, KeyError, TypeError, IndexError) as error:
            raise UnusableInput(f"cannot read the checkpoint {path}: {error}") from None

    def write(self, path: Path) -> None:
        """Written aside and renamed into place: a crash leaves the old checkpoint or the new one."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(self.to_text())
        os.replace(tmp, path)

    def to_text(self) -> str:
        doc = {
            "format": FORMAT,
            "release": installed_release(),
            "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "nodes": [
                {
                    "cluster": n.cluster,
                    "node": n.node,
                    "origin": n.origin,
                    "last_seq": n.last_seq,
                    "term": n.term,
                    "applied": list(n.applied) if n.applied else None,
                    "trimmed": n.trimmed,
                }
                for n in self.nodes
            ],
            "chain_tips": self.chain_tips,
            "window": self.window,
            "events": self.events,
        }
        return json.dumps(doc, separators=(",", ":")) + "\n"

    # -- reading only what is new ----------------------------------------------------------------------------

    def last_seqs(self) -> dict[tuple[str, str], int]:
        """(origin, node) -> the last seq the previous audit saw."""
        out: dict[tuple[str, str], int] = {}
        for n in self.nodes:
            key = (n.origin, n.node)
            out[key] = max(out.get(key, 0), n.last_seq)
        return out

    def unread_files(self, files: Sequence[str]) -> list[str]:
        """The files an incremental audit must read: all but the segments that end before their node's last seq
        (a segment ends where the next one of its folder starts)."""
        by_folder: dict[str, int] = {}
        for (origin, _node), seq in self.last_seqs().items():
            by_folder[origin] = max(by_folder.get(origin, 0), seq)
        folders: dict[str, list[tuple[int, str]]] = defaultdict(list)
        keep: list[str] = []
        for uri in files:
            match = _SEGMENT.search(uri)
            folder = as_spark_names(uri).rsplit("/", 1)[0]
            if match is None or folder not in by_folder:
                keep.append(uri)
            else:
                folders[folder].append((int(match.group(1)), uri))
        for folder, found in folders.items():
            found.sort()
            last = by_folder[folder]
            for index, (_first, uri) in enumerate(found):
                following = found[index + 1][0] if index + 1 < len(found) else None
                if following is None or following > last + 1:
                    keep.append(uri)
        return keep

    def new_only(self, events: DataFrame) -> DataFrame:
        """The events after each node's last seq (a file of an older segment read anyway: its old events)."""
        marks = self.last_seqs()
        if not marks:
            return events
        schema = T.StructType(
            [
                T.StructField("_origin", T.StringType()),
                T.StructField("node", T.StringType()),
                T.StructField("_last_seq", T.LongType()),
            ]
        )
        seen = local_frame(events.sparkSession, [(o, n, s) for (o, n), s in marks.items()], schema)
        joined = events.join(F.broadcast(seen), ["_origin", "node"], "left")
        return joined.filter(F.col("_last_seq").isNull() | (F.col("seq") > F.col("_last_seq"))).drop("_last_seq")

    def carried(self, spark: SparkSession) -> DataFrame:
        """The carried events, marked `_carried`, in the columns of the input's events."""
        schema = T.StructType(
            [
                *EVENT_SCHEMA.fields,
                T.StructField(NODE_NAME_COLUMN, T.StringType()),
                T.StructField("_source", T.StringType()),
                T.StructField("_origin", T.StringType()),
            ]
        )
        if not self.events:
            return spark.createDataFrame([], schema).withColumn(CARRIED, F.lit(True))
        parsed = local_frame(spark, [tuple(e.get(c) for c in schema.fieldNames()) for e in self.events], schema)
        # Built once, then cut off from its plan: the events travel as one literal of several MB, which every
        # task of every pass over the input would otherwise deserialize again (most of an incremental run's time).
        return parsed.select(*CONTEXT_COLUMNS, F.lit(True).alias(CARRIED)).localCheckpoint(eager=True)

    def seed(self, horizon: Horizon) -> None:
        """What the next audit's horizon starts from: holes below each node's first new seq are not gaps,
        trimmed nodes stay trimmed, and states older than the carried window are outside it."""
        for n in self.nodes:
            key = (n.cluster, n.node)
            horizon.checkpoint_from[key] = max(horizon.checkpoint_from.get(key, 0), n.last_seq + 1)
            if n.trimmed:
                horizon.trimmed.add(key)
        horizon.version_floor.update(self.window)


def with_checkpoint(spark: SparkSession, inp: Input, checkpoint: Checkpoint) -> Input:
    """The input of an incremental audit: the events after each node's last seq, and the carried ones."""
    carried = checkpoint.carried(spark)
    inp.events = checkpoint.new_only(inp.events).unionByName(carried)
    if checkpoint.events:
        found = scout(carried)
        inp.scout = merged_scouts(inp.scout, found) if inp.scout is not None else found
    return inp


# -- writing the next checkpoint ----------------------------------------------------------------------------


def _struct() -> Column:
    return F.struct(*CONTEXT_COLUMNS)


_MARKS = ("last", "term", "applied", "commit", "cut")  # the events carried per node, by the seq of each


def build(events: DataFrame, states: DataFrame, trimmed: set[tuple[str, str]], resets: Sequence[Any]) -> Checkpoint:
    """The checkpoint after an audit of `events` (new and carried): see the module's docstring.

    Two passes over the events: one of numbers only (per node, the seqs of the events it carries), then one that
    picks the carried events (those seqs, the reset events, the window's states and elections) and writes only
    those as JSON. The window's bounds come from the state table. (Per-node `max_by` of whole events, and a pass
    of their own for the window and for the elections, made writing a checkpoint cost a third of an audit.)"""
    last_reset: dict[tuple[str, str], int] = {}
    for r in resets:
        key = (r["cluster_uuid"], r["node"])
        last_reset[key] = max(last_reset.get(key, 0), int(r["seq"]))
    since_reset = _since(last_reset)
    typ = F.col("type")
    keys = ("cluster_uuid", "node", "_origin")
    seq = F.col("seq")
    per_node = (
        events.groupBy(*keys)
        .agg(
            F.max("seq").alias("last"),
            F.max(F.when(typ.isin(*TERM_TYPES) & since_reset, F.struct("term", "seq"))).alias("term"),
            F.max(F.when((typ == "applied") & since_reset, F.struct("seq", "term", "version"))).alias("applied"),
            F.max(F.when(typ.isin(*COMMIT_TYPES), seq)).alias("commit"),
            F.max(F.when(typ == "retention_cut", seq)).alias("cut"),
        )
        .select(*keys, "last", "term", "applied", "commit", "cut")
        .collect()
    )
    checkpoint = Checkpoint()
    wanted: set[tuple[str, str, str, int]] = set()
    for r in per_node:
        seqs = [r["last"], r["commit"], r["cut"], *(r[m]["seq"] if r[m] else None for m in ("term", "applied"))]
        wanted.update((r["cluster_uuid"], r["node"], r["_origin"], int(s)) for s in seqs if s is not None)
        applied = (r["applied"]["term"], r["applied"]["version"]) if r["applied"] is not None else None
        last_term = r["term"]["term"] if r["term"] is not None else None
        trimmed_here = (r["cluster_uuid"], r["node"]) in trimmed
        checkpoint.nodes.append(
            NodeMark(r["cluster_uuid"], r["node"], r["_origin"], r["last"], last_term, applied, trimmed_here)
        )
    tips = (
        states.filter("committed")
        .groupBy("cid")
        .agg(F.max_by(F.struct("term", "version", "state_uuid"), F.struct("version", "term")).alias("tip"))
        .collect()
    )
    floors: dict[str, int] = {}
    for r in tips:
        tip = r["tip"]
        checkpoint.chain_tips[r["cid"]] = {
            "term": tip["term"],
            "version": tip["version"],
            "state_uuid": tip["state_uuid"],
        }
        floors[r["cid"]] = max(0, tip["version"] - CARRY_VERSIONS)
    carried: dict[tuple[str, str, int], str] = {}
    for text in _carried_events(events, states, wanted, floors):
        event = json.loads(text)
        carried.setdefault((event["cluster_uuid"], event["node"], event["seq"]), text)
    checkpoint.window = floors  # older states that a later event names are outside the next audit's horizon
    checkpoint.events = [json.loads(t) for _, t in sorted(carried.items(), key=lambda kv: (kv[0][1], kv[0][2]))]
    return checkpoint


def _since(last_reset: dict[tuple[str, str], int]) -> Column:
    """True for events after their node's last reset event (and for every event of a node without one)."""
    condition: Column = F.lit(True)
    for (cluster, node), seq in last_reset.items():
        condition = F.when((F.col("cluster_uuid") == cluster) & (F.col("node") == node), F.col("seq") >= seq).otherwise(
            condition
        )
    return condition


def _per_cluster(values: dict[str, int], cluster: str = "cluster_uuid") -> Column:
    """The value for the row's cluster (null for a cluster without one)."""
    out = F.lit(None).cast("long")
    for cid, value in values.items():
        out = F.when(F.col(cluster) == cid, F.lit(value)).otherwise(out)
    return out


_WANTED = T.StructType(
    [
        T.StructField("cluster_uuid", T.StringType()),
        T.StructField("node", T.StringType()),
        T.StructField("_origin", T.StringType()),
        T.StructField("seq", T.LongType()),
    ]
)


def _carried_events(
    events: DataFrame, states: DataFrame, wanted: set[tuple[str, str, str, int]], floors: dict[str, int]
) -> list[str]:
    """As JSON: the `wanted` events (per node), every reset event, and for the carried window one event per
    state (the master's commit, or the `settings_removed` event of a rewritten copy, where there is one), the
    accepted events of its states no master has committed, and the elected events of its terms."""
    typ = F.col("type")
    # The window's first term per cluster, from the state table (one row per state, cached).
    window_states = states.filter(F.col("version") >= _per_cluster(floors, "cid"))
    first_terms = {
        r["cid"]: int(r["term"]) for r in window_states.groupBy("cid").agg(F.min("term").alias("term")).collect()
    }
    floor, term_floor = _per_cluster(floors), _per_cluster(first_terms)
    rewritten = typ == SETTINGS_REMOVED  # a copy rewritten offline: its event says so (see `state_table`)
    in_window = (typ.isin(*STATE_TYPES) | rewritten) & floor.isNotNull() & (F.col("version") >= floor)
    elected = (typ == "elected") & term_floor.isNotNull() & (F.col("term") >= term_floor)
    marked = events.join(
        F.broadcast(local_frame(events.sparkSession, sorted(wanted), _WANTED).withColumn("_wanted", F.lit(True))),
        ["cluster_uuid", "node", "_origin", "seq"],
        "left",
    )
    single = F.col("_wanted").isNotNull() | typ.isin(*RESET_TYPES) | elected
    picked = (
        marked.filter(single | in_window)
        .select(
            "cluster_uuid",
            "state_uuid",
            "seq",
            single.alias("single"),
            in_window.alias("window"),
            (typ == "accepted").alias("accepted"),
            ((typ == "committed") & (F.col("node") == F.col("master"))).alias("master_commit"),
            F.when((typ == "committed") & (F.col("node") == F.col("master")) | rewritten, 3)
            .when(typ == "accepted", 2)
            .otherwise(1)
            .alias("rank"),
            F.to_json(_struct()).alias("json"),
        )
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        out = [r["json"] for r in picked.filter("single").select("json").collect()]
        per_state = (
            picked.filter("window")
            .groupBy("cluster_uuid", "state_uuid")
            .agg(
                F.max_by("json", F.struct("rank", "seq")).alias("one"),
                # Only a state no master has committed carries its accepted events.
                F.when(~F.max("master_commit"), F.collect_list(F.when(F.col("accepted"), F.col("json")))).alias(
                    "accepted"
                ),
            )
            .collect()
        )
    finally:
        picked.unpersist()
    for r in per_state:
        out.append(r["one"])
        out.extend(r["accepted"] or [])
    return out
