"""The safety invariants, each a set of DataFrame transformations over the shared frames."""

from __future__ import annotations

from collections.abc import Callable

from coordinated.audit.invariants import chain, masters, nodes, quorum, states
from coordinated.audit.prepare import Frames
from coordinated.audit.violations import CheckResult

CHECKS: tuple[Callable[[Frames], list[CheckResult]], ...] = (
    masters.check,
    states.check,
    chain.check,
    nodes.check,
    quorum.check,
)


def run_all(frames: Frames) -> list[CheckResult]:
    """One result per invariant: checks that cover parts of one invariant are merged."""
    merged: dict[str, CheckResult] = {}
    for check in CHECKS:
        for r in check(frames):
            if r.invariant in merged:
                m = merged[r.invariant]
                m.total += r.total
                m.violations = (m.violations + r.violations)[: frames.max_violations]
            else:
                merged[r.invariant] = r
    return list(merged.values())
