"""The safety invariants of docs/audit.md, each a set of DataFrame transformations."""

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
    return [result for check in CHECKS for result in check(frames)]
