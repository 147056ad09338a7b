"""The key and session maps of the state a batch builds: persistent maps changed in place, with the keys the
batch touched (from which its diff is built without comparing whole maps), the total entry size and an undo
log, so that a task that would exceed a limit, or that must wait for the next publication (batch_writes), can
be taken back, and the keys a task changed are known. Pure data.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, NamedTuple

import immutables
import msgspec

from coordinated.coordination.batch_writes import EVERY_KEY, Writes
from coordinated.coordination.client import PrevKey
from coordinated.coordination.state import LEGACY_KEY_VERSION, ClusterState, KeyVersion, Session, diff_maps, persistent

_SIZE_ENCODER = msgspec.json.Encoder()


def value_size(value: Any) -> int:
    """A value's size against `cluster.metadata.max_value_size`: its JSON encoding."""
    return len(_SIZE_ENCODER.encode(value))


def entry_size(key: str, value: Any) -> int:
    """What a key costs against `cluster.metadata.max_state_size`: its UTF-8 name and JSON-encoded value."""
    return len(key.encode()) + len(_SIZE_ENCODER.encode(value))


def state_entries_size(kv: Mapping[str, Any]) -> int:
    return sum(entry_size(key, value) for key, value in kv.items())


class Tracked:
    """A persistent map a batch changes: a mutation of the base's map, and the keys the batch touched, from
    which the batch's diff is built without comparing whole maps."""

    def __init__(self, base: Mapping[str, Any]) -> None:
        self.base = persistent(base)
        self.map = self.base.mutate()
        self.touched: set[str] = set()
        self.replaced = False

    def __contains__(self, key: str) -> bool:
        return key in self.map

    def __getitem__(self, key: str) -> Any:
        return self.map[key]

    def __len__(self) -> int:
        return len(self.map)

    def get(self, key: str, default: Any = None) -> Any:
        return self.map.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.map[key] = value
        self.touched.add(key)

    def pop(self, key: str) -> None:
        if key in self.map:
            del self.map[key]
            self.touched.add(key)

    def items(self) -> list[tuple[str, Any]]:
        current = self.map.finish()
        self.map = current.mutate()
        return list(current.items())

    def replace_all(self, mapping: Mapping[str, Any]) -> None:
        self.map, self.replaced = persistent(mapping).mutate(), True

    def snapshot(self) -> immutables.Map[str, Any]:
        """The map as it is now, for `restore` (the mutation goes on from it)."""
        current = self.map.finish()
        self.map = current.mutate()
        return current

    def restore(self, snapshot: immutables.Map[str, Any]) -> None:
        """Back to a `snapshot`: a rollback over a restore. The batch's changes are then still compared in full,
        which is exact (only slower)."""
        self.map = snapshot.mutate()

    def finish(self) -> immutables.Map[str, Any]:
        return self.map.finish()

    def changes(self, finished: immutables.Map[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]] | None:
        """The upserts and deletes from the base to `finished` (what `finish` returned); None: unchanged."""
        if self.replaced:  # a restore: compared once, in full
            diff = diff_maps(self.base, finished)
            return None if diff.is_empty() else (diff.upserts, diff.deletes)
        # A key a rollback put back holds its base object again: no change.
        present = sorted(
            key
            for key in self.touched
            if key in finished and (key not in self.base or finished[key] is not self.base[key])
        )
        # A key created and deleted again within the batch is no change.
        deleted = tuple(sorted(key for key in self.touched if key not in finished and key in self.base))
        if not present and not deleted:
            return None
        return {key: finished[key] for key in present}, deleted


_ABSENT = object()


class _KeyUndo(NamedTuple):
    """A key's change, taken back: its value (_ABSENT if none), versions and session before."""

    key: str
    value: Any
    versions: KeyVersion | None
    session: str | None


class _SessionUndo(NamedTuple):
    """A session's change, taken back: the session before (None if there was none)."""

    session_id: str
    before: Session | None


class _RestoreUndo(NamedTuple):
    """A restore, taken back: the key maps and the size before it."""

    kv: immutables.Map[str, Any]
    versions: immutables.Map[str, Any]
    kv_sessions: immutables.Map[str, Any]
    size: int | None


class BatchKeys:
    """The key and session maps of the state a batch builds (persistent maps, changed in place). It keeps the
    total entry size (when `size` is given) and an undo log of key and session changes, so that a task can be
    taken back, and the keys each task changed are known (`written_since`)."""

    def __init__(
        self,
        base: ClusterState,
        new_version: int,
        size: int | None = None,
        session_keys: Callable[[str], Collection[str]] | None = None,
        keys_with_prefix: Callable[[str], Iterable[str]] | None = None,
    ) -> None:
        self.new_version = new_version
        self.kv, self.versions = Tracked(base.kv), Tracked(base.kv_versions)
        self.kv_sessions, self.sessions = Tracked(base.kv_sessions), Tracked(base.sessions)
        self.size = size
        self._base_session_keys = session_keys or (
            lambda session_id: [key for key, owner in base.kv_sessions.items() if owner == session_id]
        )
        self._base_keys_with_prefix = keys_with_prefix or (  # in key order
            lambda prefix: sorted(key for key in base.kv if key.startswith(prefix))
        )
        self._undo: list[_KeyUndo | _SessionUndo | _RestoreUndo] = []

    def mark(self) -> int:
        return len(self._undo)

    def written_since(self, mark: int) -> Writes:
        """The keys changed since `mark` (every key, if a restore replaced them)."""
        written: set[str] = set()
        for entry in self._undo[mark:]:
            if isinstance(entry, _RestoreUndo):
                return EVERY_KEY
            if isinstance(entry, _KeyUndo):
                written.add(entry.key)
        return written

    def rollback(self, mark: int) -> None:
        """Takes back every key and session change since `mark`."""
        while len(self._undo) > mark:
            entry = self._undo.pop()
            if isinstance(entry, _SessionUndo):
                if entry.before is None:
                    self.sessions.pop(entry.session_id)
                else:
                    self.sessions.set(entry.session_id, entry.before)
            elif isinstance(entry, _RestoreUndo):
                self.kv.restore(entry.kv)
                self.versions.restore(entry.versions)
                self.kv_sessions.restore(entry.kv_sessions)
                self.size = entry.size
            else:
                self._undo_key(entry)

    def _undo_key(self, entry: _KeyUndo) -> None:
        key, value, versions, session = entry
        self._resize(key, value, self.kv.get(key, _ABSENT))
        if value is _ABSENT:
            self.kv.pop(key)
        else:
            self.kv.set(key, value)
        for tracked, old in ((self.versions, versions), (self.kv_sessions, session)):
            if old is None:
                tracked.pop(key)
            else:
                tracked.set(key, old)

    def _record_session(self, session_id: str) -> None:
        self._undo.append(_SessionUndo(session_id, self.sessions.get(session_id)))

    def _resize(self, key: str, new: Any, old: Any) -> None:
        if self.size is not None:
            self.size += (entry_size(key, new) if new is not _ABSENT else 0) - (
                entry_size(key, old) if old is not _ABSENT else 0
            )

    def _record(self, key: str) -> None:
        self._undo.append(_KeyUndo(key, self.kv.get(key, _ABSENT), self.versions.get(key), self.kv_sessions.get(key)))

    def get(self, key: str) -> KeyVersion | None:
        if key not in self.kv:
            return None
        found: KeyVersion = self.versions.get(key, LEGACY_KEY_VERSION)
        return found

    def version(self, key: str) -> int:
        """The key's version; 0 if it does not exist."""
        versions = self.get(key)
        return versions.version if versions else 0

    def previous(self, key: str) -> PrevKey | None:
        """The key as it is now, for a write that asked for its previous value; None if it does not exist."""
        versions = self.get(key)
        if versions is None:
            return None
        return PrevKey(self.kv[key], versions.version, versions.create_version, self.kv_sessions.get(key))

    def put(self, key: str, value: Any, session: str | None = None) -> KeyVersion:
        """A put with a session makes the key ephemeral; without one, persistent (as etcd's put without a lease)."""
        existing = self.get(key)
        self._record(key)
        self._resize(key, value, self.kv.get(key, _ABSENT))
        self.kv.set(key, value)
        versions = KeyVersion(self.new_version, existing.create_version if existing else self.new_version)
        self.versions.set(key, versions)
        if session is None:
            self.kv_sessions.pop(key)
        else:
            self.kv_sessions.set(key, session)
        return versions

    def replace_all(self, kv: dict[str, Any], versions: dict[str, KeyVersion]) -> None:
        """A restore: exactly these keys, with the versions they had. Restored keys are persistent: a
        snapshot's sessions belonged to clients of another time, so no restored key is ephemeral."""
        self._undo.append(
            _RestoreUndo(self.kv.snapshot(), self.versions.snapshot(), self.kv_sessions.snapshot(), self.size)
        )
        self.kv.replace_all(kv)
        self.versions.replace_all(versions)
        self.kv_sessions.replace_all({})
        if self.size is not None:
            self.size = state_entries_size(kv)

    def delete(self, key: str) -> bool:
        if key not in self.kv:
            return False
        self._record(key)
        self._resize(key, _ABSENT, self.kv[key])
        self.kv.pop(key)
        self.versions.pop(key)
        self.kv_sessions.pop(key)
        return True

    def add_session(self, session_id: str, session: Session) -> None:
        self._record_session(session_id)
        self.sessions.set(session_id, session)

    def end_session(self, session_id: str) -> bool:
        """Remove the session and delete its ephemeral keys; False if there is no such session."""
        if session_id not in self.sessions:
            return False
        self._record_session(session_id)
        self.sessions.pop(session_id)
        # Its keys in the base state, and any this batch made ephemeral: in proportion to those, not to all keys.
        candidates = {*self._base_session_keys(session_id), *self.kv_sessions.touched}
        for key in sorted(candidates):
            if self.kv_sessions.get(key) == session_id:
                self.delete(key)
        return True

    def delete_prefix(self, prefix: str, limit: int | None = None) -> tuple[int, bool]:
        """Deletes the keys under `prefix` in key order, at most `limit` of them (None: every one); (how many it
        deleted, whether any is left). In proportion to those keys (and to the keys this batch touched), not to
        every key under the prefix, nor to every key."""
        touched = sorted(key for key in self.kv.touched if key.startswith(prefix))
        deleted = 0
        previous = None
        for key in heapq.merge(self._base_keys_with_prefix(prefix), touched):
            if key == previous:
                continue
            previous = key
            if limit is not None and deleted >= limit:
                if key in self.kv:
                    return deleted, True
                continue
            if self.delete(key):
                deleted += 1
        return deleted, False

    def checkpoint_sessions(self, session_ids: tuple[str, ...], checkpoint: Callable[[str, Session], Session]) -> None:
        for session_id in session_ids:
            session = self.sessions.get(session_id)
            if session is not None:
                recorded = checkpoint(session_id, session)
                if recorded != session:
                    self._record_session(session_id)
                    self.sessions.set(session_id, recorded)

    def finish(self) -> tuple[dict[str, immutables.Map[str, Any]], dict[str, tuple[dict[str, Any], tuple[str, ...]]]]:
        """The maps of the new state by field name, and the changes of those that changed."""
        tracked = {
            "kv": self.kv,
            "kv_versions": self.versions,
            "sessions": self.sessions,
            "kv_sessions": self.kv_sessions,
        }
        maps = {name: one.finish() for name, one in tracked.items()}
        changes = {name: change for name, one in tracked.items() if (change := one.changes(maps[name])) is not None}
        # An unchanged map stays the base's own object: readers skip work on `before.x is after.x` (a session
        # pass per commit, for one) and would otherwise redo it for every write.
        maps = {name: maps[name] if name in changes else one.base for name, one in tracked.items()}
        return maps, changes
