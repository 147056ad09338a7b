"""The operator's work queue: which clusters it watches, and when each gets its next pass.

One pass at a time per cluster; requests that arrive while a pass runs (pod events) are coalesced into exactly
one more pass; a pass that changed something is followed at once, and one that waits is followed after 0.5, 1,
2, 4 ... s, up to the reconcile interval; and one periodic loop goes over every cluster. The pass itself is a
callback, so the queue knows nothing of what a pass does, and a test can drive it with any coroutine.

The queue is an object, not module state: the startup handler makes one and keeps it in Kopf's operator-wide
memo, which every per-object memo copies by reference.

With several operator replicas, only the leader (leadership.py) runs passes: every replica's queue follows the
clusters the watch shows, but `leading` gates every pass, `lead` starts passes over all of them when this replica
becomes the leader, and `step_down` cancels what is under way or waiting when it stops being one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import kopf

from coordinated.operator.planner import PAUSED_REASON, Action, ActionKind

Pass = Callable[[kopf.Body, kopf.Memo, logging.Logger], Awaitable[Action | None]]


def cluster_key(body: kopf.Body) -> str:
    return f"{body['metadata'].get('namespace')}/{body['metadata']['name']}"


def essence(body: kopf.Body) -> tuple[object, ...]:
    """What a change of the resource consists of for the operator: its spec (the generation), its annotations
    (pause, snapshot requests, the operator's own records) and labels; not its status, which passes write."""
    metadata = body.get("metadata") or {}
    annotations = {
        key: value for key, value in (metadata.get("annotations") or {}).items() if not key.startswith("kopf.")
    }
    return (
        metadata.get("generation"),
        tuple(sorted(annotations.items())),
        tuple(sorted((metadata.get("labels") or {}).items())),
        metadata.get("deletionTimestamp"),
    )


def follow_up_delay(action: Action, repeats: int, interval: float) -> float | None:
    """Seconds until the next pass after `action`, taken `repeats` times in a row before (None: the periodic pass
    and the pod watch suffice)."""
    if action.changes_something and repeats == 0:
        return 0.0
    if action.changes_something or (action.kind is ActionKind.WAIT and action.reason != PAUSED_REASON):
        return min(interval, 0.5 * 2.0**repeats)
    return None


class WorkQueue:
    """`run_pass` does one pass and returns what it decided (None: nothing to follow up); `interval` is read at
    every use, so a changed reconcile interval takes effect at the next wait; `logger` is given to the passes
    the queue starts itself."""

    def __init__(
        self,
        run_pass: Pass,
        interval: Callable[[], float],
        logger: logging.Logger,
        leading: Callable[[], bool] = lambda: True,
    ) -> None:
        self._run_pass = run_pass
        self._interval = interval
        self._logger = logger
        self._leading = leading
        self._known: dict[str, kopf.Body] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._periodic: asyncio.Task[None] | None = None
        self._soon: dict[str, asyncio.Task[None]] = {}  # the prompt pass under way, per cluster
        self._again: set[str] = set()  # clusters whose prompt pass must run once more
        self._later: dict[str, asyncio.Task[None]] = {}  # the follow-up pass waiting, per cluster
        self._streaks: dict[str, tuple[tuple[str, str], int]] = {}  # the last decision, how many passes in a row
        self._running: set[asyncio.Task[Any]] = set()  # the tasks running a pass now
        self._stopped = False

    def watch(self, body: kopf.Body) -> bool:
        """Follows the cluster; True when it is new to the queue or changed (essence), which asks for a pass."""
        key = cluster_key(body)
        before = self._known.get(key)
        self._known[key] = body
        return before is None or essence(before) != essence(body)

    def forget(self, key: str) -> None:
        """The cluster is deleted: no more passes (one under way ends by itself: it finds the cluster gone)."""
        self._known.pop(key, None)
        self._soon.pop(key, None)
        self._again.discard(key)
        self._streaks.pop(key, None)
        if (later := self._later.pop(key, None)) is not None:
            later.cancel()

    def watches(self, key: str) -> bool:
        return key in self._known

    def pass_under_way(self, key: str) -> asyncio.Task[None] | None:
        return self._soon.get(key)

    async def run(self, body: kopf.Body, memo: kopf.Memo, logger: logging.Logger) -> None:
        """One pass for this cluster, after any other pass for it (timers and change handlers may overlap; scaling
        steps must not), then its follow-up."""
        if self._stopped:
            return  # the operator stops: what the pass uses is being closed
        key = cluster_key(body)
        task = asyncio.current_task()
        if task is not None:
            self._running.add(task)
        try:
            async with self._locks.setdefault(key, asyncio.Lock()):
                if not self._leading():
                    return  # another replica reconciles
                action = await self._run_pass(body, memo, logger)
                if action is not None:
                    self._follow_up(key, memo, action)
        finally:
            if task is not None:
                self._running.discard(task)

    def start_periodic(self, memo: kopf.Memo) -> asyncio.Task[None]:
        if self._periodic is None or self._periodic.done():
            self._periodic = asyncio.create_task(self.reconcile_periodically(memo))
        return self._periodic

    def stop(self) -> None:
        """The operator stops: no pass starts any more, and the periodic loop and the follow-ups waiting are
        cancelled (a pass under way goes on: `drain` waits for it)."""
        self._stopped = True
        self._cancel_scheduled()

    def _cancel_scheduled(self) -> None:
        """The periodic loop and the follow-ups waiting are cancelled (what is scheduled, not what runs)."""
        if self._periodic is not None:
            self._periodic.cancel()
            self._periodic = None
        for later in self._later.values():
            later.cancel()
        self._later.clear()

    async def drain(self, timeout: float) -> None:
        """Wait, at most `timeout` seconds, for the passes under way to end, so that the caller closes what they use
        (the sidecar connections) only after them: a pass cut short by a closed client reports a failure that is
        none (a `ReconcileFailed` Event on every operator upgrade or restart)."""
        running = [task for task in self._running if task is not asyncio.current_task() and not task.done()]
        if running:
            await asyncio.wait(running, timeout=timeout)

    def lead(self, memo: kopf.Memo) -> None:
        """This replica became the leader: the periodic loop, and a pass over every cluster at once."""
        if self._stopped:
            return  # the operator stops
        self.start_periodic(memo)
        for key in list(self._known):
            self.request_pass(key, memo)

    def step_down(self) -> None:
        """This replica stopped being the leader: nothing more starts (until it leads again), the periodic loop and
        the follow-ups waiting are cancelled, and so are the passes under way (their next step would act on a
        cluster another replica may reconcile by now)."""
        self._cancel_scheduled()
        for task in [*self._soon.values(), *self._running]:
            if task is not asyncio.current_task():
                task.cancel()
        self._soon.clear()
        self._again.clear()
        self._streaks.clear()

    async def reconcile_periodically(self, memo: kopf.Memo) -> None:
        while True:
            await asyncio.sleep(self._interval())
            for key, body in list(self._known.items()):
                if (later := self._later.get(key)) is not None and not later.done():
                    continue  # its follow-up comes within the interval anyway: one pass, not two
                await self.run(body, memo, self._logger)

    def request_pass(self, key: str, memo: kopf.Memo) -> None:
        """A pass soon: at once, or right after the one under way (however many requests come meanwhile)."""
        if key not in self._known or self._stopped or not self._leading():
            # a pod of a cluster this operator does not (or no longer) watch, the operator stops, or another
            # replica leads
            return
        running = self._soon.get(key)
        if running is not None and not running.done():
            self._again.add(key)
            return
        self._soon[key] = asyncio.create_task(self._pass_now(key, memo))

    def _follow_up(self, key: str, memo: kopf.Memo, action: Action) -> None:
        if key not in self._known:
            return  # deleted meanwhile, or a pass outside the watch
        decision = (action.kind.value, action.reason)
        previous, count = self._streaks.get(key, (None, 0))
        repeats = count if previous == decision else 0
        self._streaks[key] = (decision, repeats + 1)
        delay = follow_up_delay(action, repeats, self._interval())
        if delay is None:
            return
        pending = self._later.get(key)
        if pending is not None and not pending.done():
            pending.cancel()
        self._later[key] = asyncio.create_task(self._pass_after(key, memo, delay))

    async def _pass_after(self, key: str, memo: kopf.Memo, delay: float) -> None:
        await asyncio.sleep(delay)
        self.request_pass(key, memo)

    async def _pass_now(self, key: str, memo: kopf.Memo) -> None:
        while (body := self._known.get(key)) is not None:
            self._again.discard(key)
            await self.run(body, memo, self._logger)
            if key not in self._again:
                return
