"""Holes in a node's seqs that the files themselves explain, so that `history-gap` does not report them.

Two, each right after the last event of one file and before the first of the next (never inside a file):

- **A crash-cut last line whose seq the next segment does not reuse.** The writer gives the seq of a crash-cut
  line to the next event, in a new segment, so the cut line leaves no hole. But a file's end can also be lost
  after the node went on writing in a newer segment (a machine crash with `history.fsync` off loses the tail
  of the older file's page cache, earlier releases' histories show it): the older file then ends in a cut line
  and the newer one starts at the seq after it. The hole is the cut line's event, noted in the report like
  every cut line: it is not a gap when the older file ends in a crash-cut line, the hole is at most two seqs
  (a format-2 line may stand for two events), and where the cut text shows its `"seq"`, the hole ends there.
- **The seqs a start skipped past a damaged segment.** A node that finds its newest compressed segment
  damaged continues past every seq the segment can hold, and first writes a `history_lost` event naming the
  segment (`damaged_segment`) and the skipped seqs (`history_read.seq_bound`). Where the input holds a whole
  copy of that segment (the archive's, uploaded before the damage: a damaged copy is unusable input), the
  hole between its last event and that `history_lost` event is seqs no event ever had: not a gap. Any other
  hole, and any other `history_lost` event, is still reported.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql import types as T

from coordinated.audit.reading import display_source
from coordinated.audit.violations import local_frame

MAX_CHECKED = 1000  # holes looked at; past these, the rest are reported as they are
MAX_CUT_HOLE = 2  # seqs one line stands for
_FORMAT2_STARTS = ('{"seq"', '{"format"')
_SEQ = re.compile(r'"seq"\s*:\s*(\d+)\s*[,}]')
Key = tuple[str, str, int]  # (cluster UUID, node id, seq)
_END_COLUMNS = ("type", "_source", "last_lost_seq", "damaged_segment")


def explained_holes(events: DataFrame, gaps: Sequence[Row], cut_notes: Sequence[Mapping[str, Any]]) -> set[Key]:
    """Of the `gap` rows (a hole before `seq`, after `prev_seq`), those the files explain (see the module's
    docstring), as (cluster, node, seq)."""
    holes = [r for r in gaps if r["gap"] == "gap" and r["prev_seq"] is not None][:MAX_CHECKED]
    if not holes:
        return set()
    ends = _ends(events, {(r["cluster_uuid"], r["node"], s) for r in holes for s in (r["seq"], r["prev_seq"])})
    cut_by_file = {str(note["source"]): note for note in cut_notes}
    explained: set[Key] = set()
    for r in holes:
        c, node, seq, prev = r["cluster_uuid"], r["node"], r["seq"], r["prev_seq"]
        before, after = ends.get((c, node, prev)), ends.get((c, node, seq))
        if before is None or after is None or before["file"] is None or before["file"] == after["file"]:
            continue
        if _cut_line_hole(cut_by_file.get(before["file"]), prev, seq) or _skipped_hole(before, after, seq):
            explained.add((c, node, seq))
    return explained


def _cut_line_hole(note: Mapping[str, Any] | None, prev: int, seq: int) -> bool:
    if note is None:
        return False
    text = str(note.get("_text") or note.get("text") or "")
    # A format-2 line starts with its seq (or the segment's format) and may stand for two events; format 1, one.
    most = MAX_CUT_HOLE if text.startswith(_FORMAT2_STARTS) else 1
    if not 1 <= seq - prev - 1 <= most:
        return False
    shown = _SEQ.search(text)
    return shown is None or int(shown.group(1)) == seq - 1


def _skipped_hole(before: Mapping[str, Any], after: Mapping[str, Any], seq: int) -> bool:
    return (
        after["type"] == "history_lost"
        and after["damaged_segment"] is not None
        and after["last_lost_seq"] == seq - 1
        and os.path.basename(str(before["file"])) == after["damaged_segment"]
    )


def _ends(events: DataFrame, refs: set[Key]) -> dict[Key, dict[str, Any]]:
    """The type, file and `history_lost` fields of the events at `refs` (one small join)."""
    schema = T.StructType(
        [
            T.StructField("cluster_uuid", T.StringType()),
            T.StructField("node", T.StringType()),
            T.StructField("seq", T.LongType()),
        ]
    )
    wanted = local_frame(events.sparkSession, sorted(refs), schema)
    rows = events.join(F.broadcast(wanted), ["cluster_uuid", "node", "seq"]).select(
        "cluster_uuid", "node", "seq", *_END_COLUMNS
    )
    out: dict[Key, dict[str, Any]] = {}
    for row in rows.collect():
        key = (row["cluster_uuid"], row["node"], row["seq"])
        source = row["_source"]
        found = {
            "type": row["type"],
            "file": display_source(str(source)) if source is not None else None,
            "last_lost_seq": row["last_lost_seq"],
            "damaged_segment": row["damaged_segment"],
        }
        out[key] = found if key not in out else {**found, "file": None}  # a seq twice: no explanation
    return out
