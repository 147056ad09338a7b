"""commit-quorum: every commit by a master rests on a publish quorum of that state.

For each state with a master's `committed` event:
- the event must carry a quorum (a master's commit without one is a violation);
- the quorum must be a majority of both configurations of the state as its `accepted` events record them
  (not as the committing event states them), and there must be such an `accepted` event;
- every quorum member whose history is in the input must have an `accepted` event for that state.

The state table answers this for almost every state with masks and hashes; the states it cannot clear
(and only those) are checked again here with the strings, so a hash never decides a violation.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from coordinated.audit.prepare import Frames, is_master_commit, quorum_candidates
from coordinated.audit.schema import COMMIT_QUORUM
from coordinated.audit.violations import CheckResult, Violation, as_example, first_rows, local_frame

KEY = ["cluster_uuid", "state_uuid"]


def _majority(quorum: Column, config: Column) -> Column:
    cfg = F.array_distinct(F.coalesce(config, F.array()))
    return F.size(F.array_intersect(F.array_distinct(quorum), cfg)) * 2 > F.size(cfg)


def check(fr: Frames) -> list[CheckResult]:
    if not fr.flags("quorum"):
        return [CheckResult(COMMIT_QUORUM, 0, [])]
    cand = fr.states.filter(quorum_candidates()).select(F.col("cid").alias("cluster_uuid"), "state_uuid")
    ev = fr.events.join(cand, KEY, "left_semi")
    acc = (
        ev.filter(F.col("type") == "accepted")
        .groupBy(*KEY)
        .agg(
            F.array_sort(F.collect_set("node")).alias("acceptors"),
            F.collect_set(F.struct("last_committed_config", "last_accepted_config")).alias("configs"),
        )
    )
    present_rows = [(c, sorted(nodes)) for c, nodes in fr.nodes.present().items()]
    present = local_frame(
        fr.spark,
        present_rows,
        T.StructType(
            [T.StructField("cluster_uuid", T.StringType()), T.StructField("present", T.ArrayType(T.StringType()))]
        ),
    )
    quorum = F.coalesce("quorum", F.array())
    # Older than the horizon, a member's accepted event may be gone with a trimmed history: only what the events
    # present show is judged there.
    beyond = fr.horizon.beyond("cluster_uuid")
    checked = (
        ev.filter(is_master_commit())
        .join(acc, KEY, "left")
        .join(F.broadcast(present), "cluster_uuid", "left")
        .select(
            "*",
            F.filter(
                F.coalesce("configs", F.array()),
                lambda c: (
                    ~(_majority(quorum, c["last_committed_config"]) & _majority(quorum, c["last_accepted_config"]))
                ),
            ).alias("short_of"),
            F.when(
                beyond,
                F.filter(
                    quorum,
                    lambda m: (
                        F.array_contains(F.coalesce("present", F.array()), m)
                        & ~F.array_contains(F.coalesce("acceptors", F.array()), m)
                    ),
                ),
            )
            .otherwise(F.array().cast("array<string>"))
            .alias("missing"),
            beyond.alias("_judged"),
        )
        .filter(
            F.col("quorum").isNull()
            | (F.col("acceptors").isNull() & F.col("_judged"))
            | (F.size("short_of") > 0)
            | (F.size("missing") > 0)
        )
    )
    total, rows = first_rows(checked, ["cluster_uuid", "version", "term", "node", "seq"], fr.max_violations)
    violations = []
    for r in rows:
        head = f"cluster {r['cluster_uuid']}: {r['node']} committed term {r['term']} version {r['version']}"
        problems = []
        if r["quorum"] is None:
            problems.append("with no quorum at all")
        elif r["acceptors"] is None and r["_judged"]:
            problems.append(
                f"with quorum {sorted(r['quorum'])}, but no node's accepted event records that state, "
                "so its configurations are unknown"
            )
        for c in r["short_of"] if r["quorum"] is not None else []:
            short = [
                f"{name} {sorted(c[name] or [])}"
                for name in ("last_committed_config", "last_accepted_config")
                if not _is_majority(r["quorum"] or [], c[name] or [])
            ]
            problems.append(
                f"with quorum {sorted(r['quorum'] or [])}, which is not a majority of {' nor of '.join(short)} "
                "(the state's configurations as its accepted events record them)"
            )
        if r["missing"] and r["acceptors"] is not None:
            problems.append(
                f"counting {sorted(r['missing'])} in its quorum, but their histories have no accepted event "
                "for that state"
            )
        example = as_example(r) or {}
        violations.append(Violation(COMMIT_QUORUM, f"{head} {'; and '.join(problems)}", [example]))
    return [CheckResult(COMMIT_QUORUM, total, violations)]


def _is_majority(quorum: list[str], config: list[str]) -> bool:
    cfg = set(config)
    return len(set(quorum) & cfg) * 2 > len(cfg)
