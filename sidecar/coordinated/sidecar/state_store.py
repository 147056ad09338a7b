"""The node's term and last-accepted state in one SQLite database, written in proportion to each change.

Like Elasticsearch's `PersistedClusterStateService` (a Lucene index with one document per index's metadata, one
for the global metadata, and the term and node id in the commit's user data), every write is one atomic commit
that holds only what changed:

- `kv`: one row per key (the value and its versions), upserted or deleted as the diff from the previous state
  says;
- `meta` row `state`: every other part of the state (nodes, coordination metadata, settings, and any field
  added later), encoded generically as one record, without the three fields that every state changes
  (`PER_STATE_FIELDS`). It is rewritten only when something in it changed, which most writes of keys do not;
- `meta` row `coordination`: node id, write generation, current term, the count and checksum sum of the key
  rows, and the state's version, uuid and parent uuid. A term change writes only this row.

Format 1 (before format 2) kept the version and uuids in the `state` row and rewrote it on every write; a
format-1 database is read as it is, and its first write makes it format 2.

The database is in WAL mode with `synchronous=FULL`: a commit returns once its WAL frames are fsynced, and a
crash in the middle of a commit leaves frames whose checksums fail, which SQLite discards at the next open, so
the database holds the last commit or the one before, never a mix. Rows carry a CRC32 of their key and bytes,
and the coordination row the count and CRC sum of all key rows: reading the database back checks each, so a
damaged page or a lost row is reported as corruption rather than loaded. A write that fails (an I/O error) is
rolled back, and the next write rewrites every row, since what reached the disk is then unknown.

With `deferred_sync` (the running node's store, see `group_commit`), a commit is written to the WAL without
waiting for the disk (`synchronous=NORMAL`, under which SQLite still syncs around every checkpoint) and `sync`
makes every commit written before it durable with one `fdatasync` of the WAL, which is what FULL would have done
at each commit. The caller holds back whatever depends on a commit until its sync returns. A sync that fails
leaves the store failed: what reached the disk is unknown and the WAL's later frames would chain onto frames
that may be lost, so every later write is refused until the node is restarted (and reads its database anew).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from coordinated.coordination.state import ClusterState, KeyVersion, compute_diff, decode_state, encode_state

DB_FILE = "coordination-state.db"
FORMAT = "2"
READABLE_FORMATS = ("1", FORMAT)
# The fields that every new state changes: kept in the `coordination` row (format 2), so that the `state` row
# is rewritten only when the rest of the state changes.
PER_STATE_FIELDS = ("version", "state_uuid", "parent_uuid")
# The fields the `state` row leaves out (the keys have their table, PER_STATE_FIELDS the `coordination` row), with
# the empty values it holds in their place.
_STORED_ELSEWHERE: dict[str, Any] = {"kv": {}, "kv_versions": {}, "version": 0, "state_uuid": "", "parent_uuid": None}
_CRC_MASK = (1 << 64) - 1
# Bound parameters per statement: well under SQLite's limit (32,766 since 3.32, 999 before).
_KEYS_PER_STATEMENT = 500

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value BLOB NOT NULL, crc INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL, crc INTEGER NOT NULL) WITHOUT ROWID",
)


class StoreCorrupt(Exception):
    """The database cannot be read back as a record; the message says what is wrong."""


class StorageWriteError(OSError):
    """A write did not become durable (the core's PersistedState raises OSError for that)."""


class _Coordination(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    format: str
    node_id: str
    generation: int
    current_term: int
    kv_count: int
    kv_crc_sum: int
    # Format 2: the PER_STATE_FIELDS of the state (format 1 kept them in the `state` row).
    version: int = 0
    state_uuid: str = ""
    parent_uuid: str | None = None


# A key row: the value, and its versions (None for a key written before keys carried versions).
_KeyRow = tuple[Any, KeyVersion | None]
_ENCODER = msgspec.json.Encoder(order="sorted")
_ROW_DECODER = msgspec.json.Decoder(_KeyRow)
_COORDINATION_DECODER = msgspec.json.Decoder(_Coordination)


def _crc(key: bytes, value: bytes) -> int:
    return zlib.crc32(value, zlib.crc32(key))


def encode_key_row(value: Any, versions: KeyVersion | None) -> bytes:
    return _ENCODER.encode((value, versions))


def _rest_of_state(state: ClusterState) -> bytes:
    """Every part of the state but the keys and PER_STATE_FIELDS, generically: a field added to the state later
    is kept too."""
    return encode_state(state.replace(**_STORED_ELSEWHERE))


def _rest_changed(before: ClusterState, after: ClusterState) -> bool:
    """Whether the `state` row of `after` differs from that of `before`. A state derived from another shares
    every part it did not change, so this is mostly identity checks."""
    for name in after.__struct_fields__:
        if name in _STORED_ELSEWHERE:
            continue
        old, new = getattr(before, name), getattr(after, name)
        if old is not new and old != new:
            return True
    return False


# A test hook: `COORDINATED_TEST_CRASH_POINT=<name>[@<n>]` kills the process with SIGKILL the n-th time (default
# the first) it reaches the named point between two steps of a write, as a power cut there would.
_CRASH_POINT, _, _CRASH_AFTER = os.environ.get("COORDINATED_TEST_CRASH_POINT", "").partition("@")
_crash_countdown = int(_CRASH_AFTER or "1")


def crash_point(name: str) -> None:
    global _crash_countdown
    if name == _CRASH_POINT:
        _crash_countdown -= 1
        if _crash_countdown == 0:
            os.kill(os.getpid(), signal.SIGKILL)


class StoredRecord(msgspec.Struct, frozen=True):
    node_id: str
    generation: int
    current_term: int
    state: ClusterState
    kv_crc_sum: int = 0
    fingerprint: str = ""
    key_crcs: dict[str, int] = {}  # the CRC of each key's row, as read; a StateStore built on it keeps it current


def connect(
    path: Path, create: bool = False, read_only: bool = False, deferred_sync: bool = False
) -> sqlite3.Connection:
    """A connection in WAL mode with full syncs (commits not synced with `deferred_sync`: see `StateStore.sync`);
    never creates the file unless `create`. A read-only one never checkpoints the WAL into the database or
    removes it, so looking at a directory changes nothing."""
    mode = "ro" if read_only else "rwc" if create else "rw"
    conn = sqlite3.connect(f"file:{path}?mode={mode}", uri=True, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={'NORMAL' if deferred_sync else 'FULL'}")
        conn.execute("PRAGMA cell_size_check=ON")
        if not read_only:
            # The data directory's lock keeps every other process out, so the writer takes SQLite's file locks
            # once and keeps them, instead of taking and releasing them around every commit (fcntl calls).
            conn.execute("PRAGMA locking_mode=EXCLUSIVE")
        # After a checkpoint, the WAL file is cut back to this size rather than kept at its largest.
        conn.execute("PRAGMA journal_size_limit=8388608")
    except BaseException:
        conn.close()
        raise
    return conn


def read_record(conn: sqlite3.Connection) -> StoredRecord:
    """The whole record, every row checked; raises StoreCorrupt, or sqlite3.Error when SQLite finds damage."""
    problems = [str(row[0]) for row in conn.execute("PRAGMA quick_check")]
    if problems != ["ok"]:
        raise StoreCorrupt("; ".join(problems[:3]))
    meta: dict[str, bytes] = {}
    for name, value, crc in conn.execute("SELECT name, value, crc FROM meta"):
        if not isinstance(name, str) or not isinstance(value, bytes):
            raise StoreCorrupt("a row of the wrong type in table [meta]")
        if _crc(name.encode(), value) != crc:
            raise StoreCorrupt(f"checksum mismatch in row [{name}]")
        meta[name] = value
    if "coordination" not in meta or "state" not in meta:
        raise StoreCorrupt(f"missing rows: expected [coordination] and [state], found {sorted(meta)}")
    try:
        coordination = _COORDINATION_DECODER.decode(meta["coordination"])
        rest = decode_state(meta["state"])
    except msgspec.MsgspecError as error:
        raise StoreCorrupt(f"cannot decode: {error}") from None
    except RecursionError:
        raise StoreCorrupt("cannot decode: nested too deeply") from None
    if coordination.format not in READABLE_FORMATS:
        raise StoreCorrupt(
            f"unknown format [{coordination.format}] (this version reads formats {list(READABLE_FORMATS)})"
        )
    if coordination.format != "1":
        rest = rest.replace(**{name: getattr(coordination, name) for name in PER_STATE_FIELDS})
    kv: dict[str, Any] = {}
    kv_versions: dict[str, KeyVersion] = {}
    key_crcs: dict[str, int] = {}
    crc_sum = 0
    for key, value, crc in conn.execute("SELECT key, value, crc FROM kv"):
        if not isinstance(key, str) or not isinstance(value, bytes):
            raise StoreCorrupt("a row of the wrong type in table [kv]")
        if _crc(key.encode(), value) != crc:
            raise StoreCorrupt(f"checksum mismatch in the row of key [{key}]")
        crc_sum += crc
        key_crcs[key] = crc
        try:
            kv[key], versions = _ROW_DECODER.decode(value)
        except msgspec.MsgspecError as error:
            raise StoreCorrupt(f"cannot decode the row of key [{key}]: {error}") from None
        except RecursionError:
            raise StoreCorrupt(f"cannot decode the row of key [{key}]: nested too deeply") from None
        if versions is not None:
            kv_versions[key] = versions
    if (len(kv), crc_sum & _CRC_MASK) != (coordination.kv_count, coordination.kv_crc_sum):
        raise StoreCorrupt(
            f"the key rows do not match their summary ({len(kv)} rows, the record says {coordination.kv_count}, "
            "or their checksums differ): rows were lost or replaced"
        )
    return StoredRecord(
        node_id=coordination.node_id,
        generation=coordination.generation,
        current_term=coordination.current_term,
        # Built through the constructor, so that the state holds its maps in whatever form it keeps them.
        state=type(rest)(**{**msgspec.structs.asdict(rest), "kv": kv, "kv_versions": kv_versions}),
        kv_crc_sum=coordination.kv_crc_sum,
        fingerprint=f"{coordination.generation}:{_crc(b'', meta['coordination'])}:{_crc(b'', meta['state'])}",
        key_crcs=key_crcs,
    )


def create_database(path: Path, node_id: str, generation: int, term: int, state: ClusterState) -> None:
    """Writes a complete database at `path` + `.tmp`, syncs it and renames it into place, so the database file
    either holds a whole first record or does not exist. The caller fsyncs the directory."""
    tmp = path.with_name(path.name + ".tmp")
    remove_database_files(tmp)
    conn = connect(tmp, create=True)
    try:
        for statement in _SCHEMA:
            conn.execute(statement)
        store = StateStore(conn, StoredRecord(node_id, generation - 1, term, state.replace(kv={}, kv_versions={})))
        store.write(term, state, full=True, generation=generation)
    finally:
        conn.close()  # checkpoints the WAL into the database file and removes the WAL
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    crash_point("create:synced")
    os.replace(tmp, path)


def database_files(path: Path) -> tuple[Path, ...]:
    return (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm"))


def remove_database_files(path: Path) -> None:
    for file in database_files(path):
        file.unlink(missing_ok=True)


class StateStore:
    """Writes to an open database whose content is `record`; each write is one commit, durable when `write`
    returns, or (with `wal` given: a connection opened with `deferred_sync`) once a later `sync` returns."""

    def __init__(self, conn: sqlite3.Connection, record: StoredRecord, wal: Path | None = None) -> None:
        self.conn = conn
        self.wal = wal
        self._wal_fd = -1
        self.staged = 0  # writes committed so far
        self.synced = 0  # of those, the ones known to be durable
        self.sync_failure: str | None = None
        self.syncs = 0
        self.node_id = record.node_id
        self.generation = record.generation
        self.current_term = record.current_term
        self.state = record.state
        self._kv_crc_sum = record.kv_crc_sum
        # The CRC of every key row in the database, so that a write subtracts a replaced row's CRC from the sum
        # without reading it back (a key missing here is read back: see `_old_crc_sum`).
        self._key_crcs = record.key_crcs
        # After a failed write, what reached the disk is unknown: the next write rewrites every row.
        self._full_write_needed = False
        self.bytes_written = 0
        self.writes = 0

    def write(self, term: int, state: ClusterState, full: bool = False, generation: int | None = None) -> None:
        """One commit holding the term, the state's changes since the last write, and a new generation."""
        if self.sync_failure is not None:
            raise StorageWriteError(
                f"cannot write the coordination state: an earlier sync failed ({self.sync_failure}); "
                "restart the node to read its database anew"
            )
        generation = self.generation + 1 if generation is None else generation
        full = full or self._full_write_needed
        written = 0
        crc_sum = self._kv_crc_sum
        written_crcs: dict[str, int] = {}
        gone: set[str] = set()
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                if state is not self.state or full:
                    crc_sum, written, written_crcs, gone = self._write_keys(state, full)
                    if full or _rest_changed(self.state, state):
                        rest = _rest_of_state(state)
                        self._put_meta("state", rest)
                        written += len(rest)
                coordination = _ENCODER.encode(
                    _Coordination(
                        FORMAT,
                        self.node_id,
                        generation,
                        term,
                        len(state.kv),
                        crc_sum,
                        state.version,
                        state.state_uuid,
                        state.parent_uuid,
                    )
                )
                self._put_meta("coordination", coordination)
                written += len(coordination)
                crash_point("write:rows")
                self.conn.execute("COMMIT")
            except BaseException:
                if self.conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        self.conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as error:
            self._full_write_needed = True
            raise StorageWriteError(f"cannot write the coordination state: {error}") from error
        except OSError:
            self._full_write_needed = True
            raise
        crash_point("write:committed")
        if full:
            self._key_crcs = written_crcs
        else:
            for key in gone:
                self._key_crcs.pop(key, None)
            self._key_crcs.update(written_crcs)
        self._full_write_needed = False
        self.generation = generation
        self.current_term = term
        self.state = state
        self._kv_crc_sum = crc_sum
        self.bytes_written += written
        self.writes += 1
        self.staged += 1
        if self.wal is None:
            self.synced = self.staged

    def sync(self) -> None:
        """Makes every write committed before this call durable: one fdatasync of the WAL. Safe to call from
        another thread while the event loop commits more (those may or may not be covered). Raises
        StorageWriteError, after which the store refuses every write (see the module's docstring)."""
        if self.wal is None or self.sync_failure is not None:
            if self.sync_failure is not None:
                raise StorageWriteError(f"an earlier sync failed: {self.sync_failure}")
            return
        covered = self.staged  # read before the fdatasync: every write counted here is in the file already
        try:
            crash_point("sync:before")
            if self._wal_fd < 0:
                self._wal_fd = os.open(self.wal, os.O_RDONLY)
            elif os.fstat(self._wal_fd).st_ino != os.stat(self.wal).st_ino:
                # SQLite keeps its WAL file while the connection is open (it truncates, never replaces it), so
                # another file at its path was put there from outside: syncing that one would prove nothing.
                raise OSError(f"[{self.wal}] was replaced by another file while the node ran")
            os.fdatasync(self._wal_fd)
        except OSError as error:
            self.sync_failure = str(error)
            raise StorageWriteError(f"cannot sync the coordination state: {error}") from error
        self.syncs += 1
        self.synced = max(self.synced, covered)
        crash_point("sync:done")

    def _put_meta(self, name: str, value: bytes) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO meta (name, value, crc) VALUES (?, ?, ?)", (name, value, _crc(name.encode(), value))
        )

    def _write_keys(self, state: ClusterState, full: bool) -> tuple[int, int, dict[str, int], set[str]]:
        """Rows for the keys that changed (every key when `full`); returns the new CRC sum, the bytes written, the
        new rows' CRCs and the deleted keys. A few statements per write whatever the number of keys: deleted keys'
        rows deleted, and the new rows written with one executemany of INSERT OR REPLACE (half the CPU of a
        delete and an insert per key, measured). A replaced row's CRC leaves the sum from `_key_crcs`."""
        conn = self.conn
        gone: set[str] = set()
        if full:
            conn.execute("DELETE FROM kv")
            crc_sum = 0
            changed: Iterable[str] = state.kv
        else:
            diff = compute_diff(self.state, state)
            upserted = set(diff.kv.upserts) | set(diff.kv_versions.upserts) | set(diff.kv_versions.deletes)
            gone = set(diff.kv.deletes) | {key for key in upserted if key not in state.kv}
            changed = upserted - gone
            crc_sum = self._kv_crc_sum - self._old_crc_sum(changed)
            crc_sum -= self._crc_sum_of("DELETE FROM kv WHERE key IN ({}) RETURNING crc", gone)
        written = 0
        written_crcs: dict[str, int] = {}

        def rows() -> Iterator[tuple[str, bytes, int]]:
            # Streamed to executemany: after a full state arrives, its rows are not held all at once.
            nonlocal crc_sum, written
            for key in changed:
                row = encode_key_row(state.kv[key], state.kv_versions.get(key))
                crc = _crc(key.encode(), row)
                crc_sum += crc
                written += len(row)
                written_crcs[key] = crc
                yield key, row, crc

        conn.executemany("INSERT OR REPLACE INTO kv (key, value, crc) VALUES (?, ?, ?)", rows())
        return crc_sum & _CRC_MASK, written, written_crcs, gone

    def _old_crc_sum(self, keys: set[str]) -> int:
        """The sum of the CRCs of the rows that `keys` have now (0 for a key without a row). From `_key_crcs`,
        which holds every row's CRC when the store was built from `read_record` or a full write; a key of the
        last state that it lacks is read back, so that a store built otherwise keeps a correct sum."""
        total = 0
        unknown: set[str] = set()
        crcs = self._key_crcs
        for key in keys:
            crc = crcs.get(key)
            if crc is not None:
                total += crc
            elif key in self.state.kv:
                unknown.add(key)
        return total + self._crc_sum_of("SELECT crc FROM kv WHERE key IN ({})", unknown)

    def _crc_sum_of(self, template: str, keys: set[str]) -> int:
        """The sum of the CRCs that `template` (SQL returning `crc`, with `{}` for the key list) gives for `keys`,
        at most _KEYS_PER_STATEMENT keys per statement; a key without a row adds 0."""
        total = 0
        keys_list = list(keys)
        for start in range(0, len(keys_list), _KEYS_PER_STATEMENT):
            part = keys_list[start : start + _KEYS_PER_STATEMENT]
            for (crc,) in self.conn.execute(template.format(",".join("?" * len(part))), part):
                total += int(crc)
        return total

    def close(self) -> None:
        """Closes the database; the caller makes sure no `sync` is running."""
        if self._wal_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._wal_fd)
            self._wal_fd = -1
        with contextlib.suppress(sqlite3.Error):
            self.conn.close()
