"""The node's bounded log of key changes, built from the states it applies, which watches are served from.

Each applied state is compared with the previously applied one; the keys whose version or value differ are
`put` events (at the key's version), the keys that disappeared are `delete` events (at the version of the
state that no longer has them). A node that skipped states (it lagged and received a full state) records
the skipped span as one step: a key changed several times within it appears once, with its latest value,
and a delete in it carries the version of the state that showed it. A watcher still ends at the same keys
and values, which is what it follows.

The log knows every change after `base` (the first state this process applied; older changes are unknown
here, so a restart starts a new log). If that first state held no keys, a watch from version 0 is served
too (a watcher that has seen nothing misses nothing), until the bound drops a change. It keeps at most `max_events` events, dropping the oldest steps
(and moving `base` up) beyond that; the newest step is always kept. A watch from before `base` is gone
(410): the watcher must re-read.

Comparing two applied states costs in proportion to the change only while the states between them are
alive (`compute_diff` follows the recorded derivations, which hold their parents weakly). A follower does not
apply every state it accepts (a commit can arrive after the next publication), so the node hands every
accepted state to `hold`, which keeps it until a state of its version or later is applied; without that, a
skipped version would cost a comparison of every key.

Pure data: no I/O, no clock.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import msgspec

from coordinated.coordination.state import ClusterState, Derivations, compute_diff


class WatchEvent(msgspec.Struct, frozen=True):
    type: Literal["put", "delete"]
    key: str
    value: Any
    version: int
    # The key's value in the state applied before the event's (a reference, not a copy), if it existed there.
    prev: Any = None
    had_prev: bool = False

    def to_api(self) -> dict[str, Any]:
        return {"type": self.type, "key": self.key, "value": self.value, "version": self.version}


class Step(msgspec.Struct, frozen=True):
    """The changes between two applied states, ordered by (version, key)."""

    version: int  # of the state that showed them
    events: tuple[WatchEvent, ...]


class ChangesGone(Exception):
    """The changes after the asked version are no longer (or were never) in this node's log."""

    def __init__(self, after_version: int, base: int) -> None:
        super().__init__(
            f"the changes after version [{after_version}] are no longer in this node's change log, which starts "
            f"after version [{base}]; re-read the keys and watch from the version of that read"
        )
        self.base = base


def changed_keys(before: ClusterState, after: ClusterState, derivations: Derivations | None = None) -> list[WatchEvent]:
    """What a watcher of every key sees between two applied states. In proportion to the change when `after`
    was derived from `before` in this process (the usual case: see `compute_diff`), else O(keys)."""
    if before.kv is after.kv and before.kv_versions is after.kv_versions:
        return []  # a state that changed no key shares the maps with its parent
    diff = compute_diff(before, after, derivations)
    touched = set(diff.kv.upserts) | set(diff.kv_versions.upserts) | set(diff.kv.deletes)
    events: list[WatchEvent] = []
    for key in touched:
        versions = after.key_version(key)
        had_prev = key in before.kv
        prev = before.kv.get(key)
        if versions is None:
            if had_prev:
                events.append(WatchEvent("delete", key, None, after.version, prev, True))
            continue
        old = before.key_version(key)
        value = after.kv[key]
        if old is not None and old == versions and prev == value:
            continue
        # A key's version is that of the write that changed it, so it lies in (before, after]; a key carried
        # over without a real version (written by an older release) is given the state's.
        version = versions.version if before.version < versions.version <= after.version else after.version
        events.append(WatchEvent("put", key, value, version, prev, had_prev))
    events.sort(key=lambda event: (event.version, event.key))
    return events


# Accepted states held for the next comparison; beyond this many unapplied ones the oldest go (the comparison
# then costs O(keys) once, as compute_diff follows at most MAX_DERIVATION_STEPS steps anyway).
MAX_HELD_STATES = 1024


class ChangeLog:
    def __init__(self, max_events: int, derivations: Derivations | None = None) -> None:
        self.derivations = derivations  # the node's: comparing a state with its parent then costs the change
        if max_events < 1:
            raise ValueError(f"a change log holds at least one event, got [{max_events}]")
        self.max_events = max_events
        self.base: int | None = None  # the log knows every change with a version above this
        self.version = 0  # the version of the last state recorded
        self._last: ClusterState | None = None
        self._held: deque[ClusterState] = deque(maxlen=MAX_HELD_STATES)  # accepted, not yet applied
        self._steps: deque[Step] = deque()
        self.newest: Step | None = None  # the step the last `record` added (None if it added none)
        self._step_versions: deque[int] = deque()
        self._events = 0
        # The log started from a state without keys, and nothing was dropped since: a watcher from version 0
        # (one that has seen nothing) misses nothing, since no key existed at the start.
        self._from_empty = False

    @property
    def events(self) -> int:
        return self._events

    def hold(self, accepted: ClusterState) -> None:
        """Keep an accepted state alive until a state of its version or later is recorded (see above)."""
        self._held.append(accepted)

    def _release_held(self, applied_version: int) -> None:
        while self._held and self._held[0].version <= applied_version:
            self._held.popleft()

    def record(self, state: ClusterState) -> list[str]:
        try:
            return self._record(state)
        finally:
            if state.master_node is not None:
                self._release_held(state.version)

    def _record(self, state: ClusterState) -> list[str]:
        """Take in an applied state; returns the keys it changed (sorted), for waking their watchers.

        A state without a master is not a new application but the node showing it has none (or, at startup,
        the state it recovered from disk, which may never have been committed): it is skipped."""
        self.newest = None
        if state.master_node is None:
            return []
        last = self._last
        self._last = state
        if last is None or state.version < last.version:
            # The first state of this process; or an older one, which a node never applies after a newer one
            # (if it ever did, the log could not say what changed, so it starts over).
            self._restart(state.version, not state.kv)
            return []
        if state.version == last.version:
            if state.kv is not last.kv and state.kv != last.kv:
                self._restart(state.version, False)
            return []
        self.version = state.version
        events = changed_keys(last, state, self.derivations)
        if not events:
            return []
        self.newest = Step(state.version, tuple(events))
        self._steps.append(self.newest)
        self._step_versions.append(state.version)
        self._events += len(events)
        while self._events > self.max_events and len(self._steps) > 1:
            dropped = self._steps.popleft()
            self._step_versions.popleft()
            self._events -= len(dropped.events)
            self.base = dropped.version
            self._from_empty = False
        return sorted({event.key for event in events})

    def _restart(self, version: int, from_empty: bool) -> None:
        self.base = version
        self._from_empty = from_empty
        self.version = version
        self._steps.clear()
        self._step_versions.clear()
        self._events = 0

    def events_after(
        self, prefix: str | tuple[str, ...], after_version: int, limit: int
    ) -> tuple[list[WatchEvent], int]:
        """The changes under `prefix` (or under any of several) with a version above `after_version`, in
        version order, and the version the caller has then seen everything up to. At most `limit` events unless
        one step holds more (a step is never split, so the answer's version is always a point the log fully
        covers).

        Raises ChangesGone if the log does not reach back to `after_version`."""
        if self.base is None:
            return [], after_version  # nothing applied yet: nothing known to have changed
        if after_version < self.base and not (after_version == 0 and self._from_empty):
            raise ChangesGone(after_version, self.base)
        found: list[WatchEvent] = []
        start = bisect.bisect_right(self._step_versions, after_version)
        for index in range(start, len(self._steps)):
            step = self._steps[index]
            found.extend(e for e in step.events if e.version > after_version and e.key.startswith(prefix))
            if len(found) >= limit:
                return found, step.version
        return found, max(after_version, self.version)


def prefixes_touched(prefixes: Iterable[str], sorted_keys: Sequence[str]) -> list[str]:
    """The prefixes that at least one of the keys starts with; `sorted_keys` must be sorted. Costs
    O((prefixes + keys) log keys), whatever the number of watchers behind each prefix."""
    touched: list[str] = []
    for prefix in prefixes:
        index = bisect.bisect_left(sorted_keys, prefix)
        if index < len(sorted_keys) and sorted_keys[index].startswith(prefix):
            touched.append(prefix)
    return touched
