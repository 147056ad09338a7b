"""The core's timers: order, replacement and cancellation, and what a cancelled timer keeps alive."""

from __future__ import annotations

import gc
import weakref

from coordinated.coordination.timers import Timers


class Owner:
    """A timer's key, as a Publication is: an object that holds much (its state, its tasks)."""


def test_due_timers_fire_in_deadline_order_and_replaced_or_cancelled_ones_never() -> None:
    timers = Timers()
    fired: list[str] = []
    for name, at in (("c", 30), ("a", 10), ("b", 20), ("x", 15)):
        timers.schedule(name, at, lambda name=name: fired.append(name))
    timers.schedule("b", 5, lambda: fired.append("b-replaced"))
    timers.cancel("x")
    assert timers.next_deadline() == 5
    while (callback := timers.pop_due(100)) is not None:
        callback()
    assert fired == ["b-replaced", "a", "c"]
    assert timers.next_deadline() is None


def test_cancelled_timers_do_not_keep_their_keys_alive() -> None:
    # The master sets a 30 s timeout per publication and cancels it when the publication completes, at a few
    # hundred publications per second, while an earlier timer (a check) stays scheduled ahead of them.
    timers = Timers()
    timers.schedule("follower-check", 1_000, lambda: None)
    owners: list[weakref.ref[Owner]] = []
    for i in range(2_000):
        owner = Owner()
        owners.append(weakref.ref(owner))
        timers.schedule(owner, 30_000 + i, lambda: None)
        timers.cancel(owner)
        del owner
    gc.collect()
    alive = sum(1 for ref in owners if ref() is not None)
    assert alive < 100, f"{alive} cancelled publications still held by the timer heap"
    assert timers.next_deadline() == 1_000
    callback = timers.pop_due(1_000)
    assert callback is not None and timers.next_deadline() is None


def test_compaction_keeps_every_live_timer_in_order() -> None:
    timers = Timers()
    fired: list[int] = []
    for i in range(500):
        timers.schedule(("live", i), 10_000 - i, lambda i=i: fired.append(i))
        timers.schedule(("gone", i), 5, lambda: fired.append(-1))
        timers.cancel(("gone", i))
    while (callback := timers.pop_due(20_000)) is not None:
        callback()
    assert fired == list(reversed(range(500)))
