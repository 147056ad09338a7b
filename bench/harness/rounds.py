"""Interleaved rounds over systems: each round runs every system once, in a rotated order, so that the slow
phases of a shared machine fall on all of them; each system is started fresh and always stopped."""

from __future__ import annotations

import tempfile
import traceback
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.harness.systems import System

Factory = Callable[[], System]
# label -> figure -> one value per round (or per trial)
Results = defaultdict[str, defaultdict[str, list[Any]]]


def new_results() -> Results:
    return defaultdict(lambda: defaultdict(list))


def selected(factories: list[Factory], wanted: str | None) -> list[Factory]:
    """The factories whose system label is one of the comma-separated `wanted` labels (all if None)."""
    if not wanted:
        return factories
    names = {name.strip() for name in wanted.split(",")}
    return [factory for factory in factories if factory().label in names]


def rotated(items: list[Factory], by: int) -> list[Factory]:
    if not items:
        return items
    by %= len(items)
    return items[by:] + items[:by]


async def run_system(factory: Factory, body: Callable[[System, Path], Awaitable[Any]], base: Path) -> None:
    """Start a fresh system in a data dir under `base`, run `body` on it, stop it whatever happens. A system
    that fails is reported and skipped: the other systems' figures of the round still count."""
    system = factory()
    workdir = Path(tempfile.mkdtemp(prefix="peer-", dir=base))
    try:
        await system.start(workdir)
        await system.wait_healthy()
        await body(system, workdir)
    except Exception:
        print(f"!! {system.label} failed:")
        traceback.print_exc()
    finally:
        await system.stop()
