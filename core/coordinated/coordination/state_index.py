"""Lookups over a state's keys that no field of the state holds: its keys in sorted order (prefix reads and
prefix deletes) and the ephemeral keys of each session (a session's end deletes them).

Each is built from one state on first use, in O(keys), and then moved from state to state by their diffs, in
proportion to the change (`compute_diff` follows the recorded derivations). A state that does not follow the
one indexed (after an election, or a full state received) is indexed afresh. Pure data: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Self

from sortedcontainers import SortedList

from coordinated.coordination.state import ClusterState, ClusterStateDiff, Derivations, compute_diff


class _StateIndex:
    """An index of one state (`_uuid`), built from a state, or moved on from the state it indexes by their diff."""

    def __init__(self, derivations: Derivations | None = None) -> None:
        self._uuid: str | None = None
        self.derivations = derivations  # the owner's: moving by a diff then costs in proportion to the change

    def at(self, state: ClusterState) -> Self:
        """Indexed for `state` (built afresh if it is not the state indexed)."""
        if self._uuid != state.state_uuid:
            self._build(state)
            self._uuid = state.state_uuid
        return self

    def advance(self, before: ClusterState, after: ClusterState) -> None:
        """`after` follows `before`: indexed for `after` if the index was for `before`; otherwise forgotten, to
        be built again if it is used."""
        if self._uuid is None or self._uuid == after.state_uuid:
            return
        if self._uuid != before.state_uuid:
            self._uuid = None
            return
        self._move(before, compute_diff(before, after, self.derivations))
        self._uuid = after.state_uuid

    def _build(self, state: ClusterState) -> None:
        raise NotImplementedError

    def _move(self, before: ClusterState, diff: ClusterStateDiff) -> None:
        raise NotImplementedError


class SortedKeys(_StateIndex):
    """The key names of one state, sorted, for prefix and range lookups in O(log keys + found)."""

    def __init__(self, derivations: Derivations | None = None) -> None:
        super().__init__(derivations)
        self._keys: SortedList[str] = SortedList()

    def _build(self, state: ClusterState) -> None:
        self._keys = SortedList(state.kv)

    def _move(self, before: ClusterState, diff: ClusterStateDiff) -> None:
        for key in diff.kv.deletes:
            if key in before.kv:
                self._keys.remove(key)
        for key in diff.kv.upserts:
            if key not in before.kv:
                self._keys.add(key)

    def with_prefix(self, prefix: str, after: str | None = None) -> Iterator[str]:
        """The keys that start with `prefix`, in order; with `after`, only those above it."""
        if after is None or after < prefix:
            keys = self._keys.irange(prefix)
        else:
            keys = self._keys.irange(after, inclusive=(False, True))
        for key in keys:
            if not key.startswith(prefix):
                return
            yield key

    def count(self, prefix: str) -> int:
        """How many keys start with `prefix`."""
        keys, end = self._keys, prefix_end(prefix)
        return (keys.bisect_left(end) if end else len(keys)) - keys.bisect_left(prefix)


def prefix_end(prefix: str) -> str:
    """The smallest string above every string that starts with `prefix` ("" if there is none: every string
    from the prefix on starts with it, which happens only for a prefix of maximal code points)."""
    stripped = prefix.rstrip(chr(0x10FFFF))
    if not stripped:
        return ""
    return stripped[:-1] + chr(ord(stripped[-1]) + 1)


class SessionKeys(_StateIndex):
    """The ephemeral keys of each session in one state (the inverse of `ClusterState.kv_sessions`)."""

    def __init__(self, derivations: Derivations | None = None) -> None:
        super().__init__(derivations)
        self._keys: dict[str, set[str]] = {}

    def _build(self, state: ClusterState) -> None:
        self._keys = {}
        for key, session in state.kv_sessions.items():
            self._keys.setdefault(session, set()).add(key)

    def _move(self, before: ClusterState, state_diff: ClusterStateDiff) -> None:
        diff = state_diff.kv_sessions
        for key in (*diff.deletes, *diff.upserts):
            owner = before.kv_sessions.get(key)
            if owner is not None:
                owned = self._keys.get(owner)
                if owned is not None:
                    owned.discard(key)
                    if not owned:
                        del self._keys[owner]
        for key, session in diff.upserts.items():
            self._keys.setdefault(session, set()).add(key)

    def of(self, session: str) -> frozenset[str]:
        return frozenset(self._keys.get(session, ()))
