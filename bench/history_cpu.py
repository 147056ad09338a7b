"""The CPU a follower's history costs per write, in one process: this tree's writer against another tree's.

    .venv/bin/python bench/history_cpu.py --baseline /tmp/history-base [--writes 200000] [--rounds 5]

A follower records three events per write (`accepted`, `committed`, `applied`). The baseline's writer gets
them as the node gave them to it (`HistoryEvent.to_dict()`, then its `append`: one format-1 line each);
this tree's writer gets the events (`append`, the commit folded into the apply: two format-2 lines). Both
write to files in a temporary folder, without fsync, as the node does by default. Rounds alternate between
the two; it prints the CPU time (process time) per write of each round and the ratio of the medians.
Figures only.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from coordinated.coordination.history import EventType, HistoryEvent
from coordinated.sidecar.events.history import HistoryWriter

CONFIG = ("3b478a4fe027d348", "8dcf4953bc5fbcbe", "9872f5451643145b")


def baseline_writer(tree: Path) -> ModuleType:
    """The baseline tree's `coordinated.sidecar.history`, loaded beside this tree's under another name."""
    spec = importlib.util.spec_from_file_location("baseline_history", tree / "sidecar/coordinated/sidecar/history.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def follower_events(version: int) -> tuple[HistoryEvent, HistoryEvent, HistoryEvent]:
    accepted = HistoryEvent(
        cluster_uuid="46ceb2e7c18ee17e3bf04446e1db6070",
        node=CONFIG[0],
        node_name="node-2",
        type=EventType.ACCEPTED,
        term=2,
        version=version,
        state_uuid=f"{version:032x}",
        parent_uuid=f"{version - 1:032x}",
        master=CONFIG[1],
        last_committed_config=CONFIG,
        last_accepted_config=CONFIG,
    )
    return (
        accepted,
        HistoryEvent(**{**_fields(accepted), "type": EventType.COMMITTED}),
        HistoryEvent(**{**_fields(accepted), "type": EventType.APPLIED}),
    )


def _fields(event: HistoryEvent) -> dict[str, Any]:
    return {name: getattr(event, name) for name in event.__struct_fields__}


def run_this(folder: Path, events: list[tuple[HistoryEvent, HistoryEvent, HistoryEvent]]) -> float:
    writer = HistoryWriter(folder, 16 << 20)
    started = time.process_time()
    for accepted, _committed, applied in events:
        writer.append(accepted)
        writer.append(applied, folds_commit=True)
    spent = time.process_time() - started
    writer.close()
    return spent


def run_baseline(
    module: ModuleType, folder: Path, events: list[tuple[HistoryEvent, HistoryEvent, HistoryEvent]]
) -> float:
    writer = module.HistoryWriter(folder, 16 << 20)
    started = time.process_time()
    for accepted, committed, applied in events:
        for event in (accepted, committed, applied):
            writer.append(event.to_dict())
    spent = time.process_time() - started
    writer.close()
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="a source tree, e.g. git archive main")
    parser.add_argument("--writes", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    module = baseline_writer(args.baseline)
    events = [follower_events(version) for version in range(2, args.writes + 2)]
    ours: list[float] = []
    theirs: list[float] = []
    for round_ in range(args.rounds):
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            pair = [
                ("this tree", lambda: run_this(Path(a), events)),
                ("baseline", lambda: run_baseline(module, Path(b), events)),
            ]
            for label, run in pair if round_ % 2 == 0 else reversed(pair):
                per_write = run() / args.writes * 1e6
                (ours if label == "this tree" else theirs).append(per_write)
                print(f"round {round_ + 1} {label:10} {per_write:6.2f} µs of CPU per follower write", flush=True)
    print(
        f"median: this tree {statistics.median(ours):.2f} µs, baseline {statistics.median(theirs):.2f} µs, "
        f"ratio {statistics.median(ours) / statistics.median(theirs):.2f}"
    )


if __name__ == "__main__":
    sys.exit(main())
