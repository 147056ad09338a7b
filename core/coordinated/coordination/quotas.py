"""Quotas per key prefix: what is stored under a prefix (keys, bytes, sessions) and how often it is written, held
to the limits of `PUT /_quota/NAME` where the master builds each batch, so that they are exact under any
concurrency: every write is decided against the state the batch builds, task after task, as the state size is.

- `max_keys` and `max_bytes` count the keys under the prefix and their size (UTF-8 name plus JSON value, as
  `cluster.metadata.max_state_size` counts them). A write that would take a quota above its limit is refused
  with 429 `quota_exceeded_exception`, naming the quota and the limit, and taken back; a write that shrinks
  what is used is always let through (a quota set below its usage with `force` only stops growth).
- `max_sessions` counts the sessions whose prefix (the prefix their creator holds `session` on, which the
  session create names or the node derives) lies under the quota's prefix.
- `max_writes_per_second` counts the requests that changed a key under the prefix in the last second of the
  master's clock: a sliding window, exact on one master (a new master starts with an empty window).
- `max_watch_streams` counts streaming watches with a prefix under the quota's; streams are served by nodes,
  not batches, so each node holds its own streams to the limit (sidecar features/watch_streams.py).

`QuotaUsage` is the usage of every quota in one state, built once and moved from state to state by their diffs
(the master's base states, and each node's applied states for `GET /_quota` and the metrics). `BatchQuotas` is
the running usage while a batch is built. Pure data: the master's clock comes in as `now`.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from coordinated.coordination.batch_keys import entry_size
from coordinated.coordination.client import ClusterError
from coordinated.coordination.security import Quota, SecurityMetadata
from coordinated.coordination.state import ClusterState, ClusterStateDiff, Session
from coordinated.coordination.state_index import _StateIndex

QUOTA_EXCEEDED = "quota_exceeded_exception"
WINDOW_MS = 1_000


@dataclass
class Usage:
    keys: int = 0
    bytes: int = 0
    sessions: int = 0

    def copy(self) -> Usage:
        return Usage(self.keys, self.bytes, self.sessions)


class QuotaIndex:
    """The quotas of one `SecurityMetadata`, found by the keys (or prefixes) they cover: one dict lookup per
    distinct prefix length, however many quotas there are."""

    def __init__(self, quotas: Mapping[str, Quota]) -> None:
        self.quotas = dict(quotas)
        self._by_prefix: dict[str, list[str]] = {}
        for name, quota in sorted(self.quotas.items()):
            self._by_prefix.setdefault(quota.prefix, []).append(name)
        self._lengths = sorted({len(prefix) for prefix in self._by_prefix})

    def __bool__(self) -> bool:
        return bool(self.quotas)

    def covering(self, target: str) -> list[str]:
        """The quotas whose prefix starts `target` (a key, or a prefix that lies under theirs)."""
        found: list[str] = []
        for length in self._lengths:
            if length > len(target):
                break
            names = self._by_prefix.get(target[:length])
            if names is not None:
                found.extend(names)
        return found


_INDEXES: dict[int, tuple[SecurityMetadata, QuotaIndex]] = {}


def quota_index(security: SecurityMetadata | None) -> QuotaIndex:
    """The index of a metadata's quotas, built once per metadata object (a few are kept)."""
    if security is None or not security.quotas:
        return _EMPTY_INDEX
    cached = _INDEXES.get(id(security))
    if cached is not None and cached[0] is security:
        return cached[1]
    if len(_INDEXES) >= 8:
        _INDEXES.clear()
    index = QuotaIndex(security.quotas)
    _INDEXES[id(security)] = (security, index)
    return index


_EMPTY_INDEX = QuotaIndex({})


def usage_of_state(kv: Mapping[str, Any], sessions: Iterable[Session], index: QuotaIndex) -> dict[str, Usage]:
    """Every quota's usage in these keys and sessions, counted in full: one pass over the keys."""
    usage = {name: Usage() for name in index.quotas}
    if not index:
        return usage
    for key, value in kv.items():
        names = index.covering(key)
        if names:
            size = entry_size(key, value)
            for name in names:
                usage[name].keys += 1
                usage[name].bytes += size
    for session in sessions:
        for name in index.covering(session.prefix):
            usage[name].sessions += 1
    return usage


def usage_under(prefix: str, keys: Iterable[tuple[str, Any]], sessions: Iterable[Session]) -> Usage:
    """One quota's usage: `keys` are the keys under its prefix, with their values."""
    usage = Usage()
    for key, value in keys:
        usage.keys += 1
        usage.bytes += entry_size(key, value)
    usage.sessions = sum(1 for session in sessions if session.prefix.startswith(prefix))
    return usage


class QuotaUsage(_StateIndex):
    """The usage of every quota in one state: built once, then moved by diffs in proportion to the change (a
    change of the quotas themselves counts afresh)."""

    def __init__(self, derivations: Any = None) -> None:
        super().__init__(derivations)
        self.usage: dict[str, Usage] = {}
        self.index = _EMPTY_INDEX
        self._security: SecurityMetadata | None = None

    def advance(self, before: ClusterState, after: ClusterState) -> None:
        if after.security_metadata() is not self._security:
            self._uuid = None  # the quotas changed: counted afresh when next used
            return
        super().advance(before, after)

    def _build(self, state: ClusterState) -> None:
        self._security = state.security_metadata()
        self.index = quota_index(self._security)
        self.usage = usage_of_state(state.kv, state.sessions.values(), self.index)

    def _move(self, before: ClusterState, diff: ClusterStateDiff) -> None:
        if not self.index:
            return
        for key in diff.kv.deletes:
            if key in before.kv:
                self._add_key(key, before.kv[key], -1)
        for key, value in diff.kv.upserts.items():
            if key in before.kv:
                self._add_key(key, before.kv[key], -1)
            self._add_key(key, value, 1)
        for session_id in diff.sessions.deletes:
            old = before.sessions.get(session_id)
            if old is not None:
                self._add_session(old, -1)
        for session_id, session in diff.sessions.upserts.items():
            if session_id not in before.sessions:
                self._add_session(session, 1)

    def _add_key(self, key: str, value: Any, sign: int) -> None:
        names = self.index.covering(key)
        if names:
            size = entry_size(key, value)
            for name in names:
                self.usage[name].keys += sign
                self.usage[name].bytes += sign * size

    def _add_session(self, session: Session, sign: int) -> None:
        for name in self.index.covering(session.prefix):
            self.usage[name].sessions += sign


class WriteRates:
    """The master's sliding windows of `max_writes_per_second`: the times of the writes each quota let through
    in the last second of its clock. A new master starts with none."""

    def __init__(self) -> None:
        self.windows: dict[str, collections.deque[int]] = {}

    def count(self, name: str, now: int) -> int:
        window = self.windows.get(name)
        if window is None:
            return 0
        while window and window[0] <= now - WINDOW_MS:
            window.popleft()
        return len(window)

    def record(self, name: str, now: int) -> None:
        self.windows.setdefault(name, collections.deque()).append(now)

    def forget_except(self, names: Iterable[str]) -> None:
        kept = set(names)
        for name in [name for name in self.windows if name not in kept]:
            del self.windows[name]


def quota_exceeded(name: str, quota: Quota, limit: str, used: int, wanted: int) -> ClusterError:
    value = getattr(quota, limit)
    reason = (
        f"quota [{name}] on prefix [{quota.prefix}] exceeded: [{limit}] is [{value}], and this request would make it "
        f"[{wanted}] (it is [{used}] now)"
    )
    return ClusterError(type=QUOTA_EXCEEDED, reason=reason, status=429)


def writes_exceeded(name: str, quota: Quota) -> ClusterError:
    reason = (
        f"quota [{name}] on prefix [{quota.prefix}] exceeded: [max_writes_per_second] is "
        f"[{quota.max_writes_per_second}], and that many writes under the prefix were let through in the last "
        "second; retry later"
    )
    return ClusterError(type=QUOTA_EXCEEDED, reason=reason, status=429)


def below_usage_problem(name: str, quota: Quota, usage: Usage) -> str | None:
    """A quota whose limits are below what its prefix uses now: refused unless forced."""
    for limit, used in (("max_keys", usage.keys), ("max_bytes", usage.bytes), ("max_sessions", usage.sessions)):
        value = getattr(quota, limit)
        if value is not None and value < used:
            return (
                f"[{limit}] of quota [{name}] is [{value}], below what prefix [{quota.prefix}] uses now ([{used}]); "
                "set it with force=true to stop only the growth"
            )
    return None


@dataclass
class BatchQuotas:
    """The usage of every quota while a batch is built: every key and session change of the batch moves it (as
    `BatchKeys` reports them), and each client task is held to the limits once it has run."""

    index: QuotaIndex
    usage: dict[str, Usage]
    rates: WriteRates
    now: int
    growth: dict[str, Usage] = field(default_factory=dict)  # of the running task
    written: set[str] = field(default_factory=set)  # quotas under which the running task changed a key
    recorded: list[str] = field(default_factory=list)  # the rate windows the last task kept was counted in

    # -- as BatchKeys reports changes -------------------------------------------------------------------

    def key_changed(self, key: str, old: Any, new: Any, absent: object) -> None:
        names = self.index.covering(key)
        if not names:
            return
        keys = (new is not absent) - (old is not absent)
        size = (entry_size(key, new) if new is not absent else 0) - (entry_size(key, old) if old is not absent else 0)
        for name in names:
            self.usage[name].keys += keys
            self.usage[name].bytes += size
            grown = self.growth.setdefault(name, Usage())
            grown.keys += keys
            grown.bytes += size
            self.written.add(name)

    def session_changed(self, prefix: str, sign: int) -> None:
        for name in self.index.covering(prefix):
            self.usage[name].sessions += sign

    def replaced(self, kv: Mapping[str, Any], sessions: Iterable[Session]) -> None:
        """A restore replaced every key: counted afresh."""
        self.usage = usage_of_state(kv, sessions, self.index)

    def set_quotas(self, quotas: Mapping[str, Quota], counted: Mapping[str, Usage]) -> None:
        """The batch changed the quotas: `counted` holds the usage of each new or changed one."""
        self.index = QuotaIndex(quotas)
        self.usage = {name: counted[name] if name in counted else self.usage[name] for name in quotas}

    # -- the client task --------------------------------------------------------------------------------

    def start_task(self) -> None:
        self.growth = {}
        self.written = set()

    def session_refusal(self, prefix: str) -> ClusterError | None:
        """A new session under `prefix` would take one of its quotas over `max_sessions`."""
        for name in self.index.covering(prefix):
            quota = self.index.quotas[name]
            used = self.usage[name].sessions
            if quota.max_sessions is not None and used + 1 > quota.max_sessions:
                return quota_exceeded(name, quota, "max_sessions", used, used + 1)
        return None

    def task_refusal(self) -> ClusterError | None:
        """The running task took a quota over a limit (it grew what is stored beyond it, or wrote under a prefix
        that has had its writes for this second): the refusal, after which the caller takes the task back."""
        for name, grown in sorted(self.growth.items()):
            quota, used = self.index.quotas[name], self.usage[name]
            for limit, growth, now_used in (
                ("max_keys", grown.keys, used.keys),
                ("max_bytes", grown.bytes, used.bytes),
            ):
                value = getattr(quota, limit)
                if value is not None and growth > 0 and now_used > value:
                    return quota_exceeded(name, quota, limit, now_used - growth, now_used)
        for name in sorted(self.written):
            quota = self.index.quotas[name]
            rate = quota.max_writes_per_second
            if rate is not None and self.rates.count(name, self.now) >= rate:
                return writes_exceeded(name, quota)
        return None

    def task_done(self) -> None:
        """The running task stays in the batch: its writes count against the windows."""
        self.recorded = []
        for name in self.written:
            quota = self.index.quotas.get(name)
            if quota is not None and quota.max_writes_per_second is not None:
                self.rates.record(name, self.now)
                self.recorded.append(name)
        self.task_dropped()

    def task_deferred(self) -> None:
        """The task just done waits for the next publication after all (batch_writes), its keys taken back: its
        writes leave the windows again (its usage followed the keys back)."""
        for name in self.recorded:
            window = self.rates.windows.get(name)
            if window:
                window.pop()
        self.recorded = []

    def task_dropped(self) -> None:
        """The running task was refused, or waits for the next publication: its writes do not count."""
        self.growth = {}
        self.written = set()
