"""The node's term and last-accepted state in one SQLite database, written in proportion to each change.

Like Elasticsearch's `PersistedClusterStateService` (a Lucene index with one document per index's metadata, one
for the global metadata, and the term and node id in the commit's user data), every write is one atomic commit
that holds only what changed:

- `kv`: one row per key (the value, its versions and, for an ephemeral key, its session), upserted or deleted
  as the diff from the previous state says;
- `sessions`: one row per session, likewise, so that creating, renewing or ending one session writes one row
  whatever the number of sessions;
- `meta` row `state`: every other part of the state (nodes, coordination metadata, settings, and any field
  added later), encoded generically as one record, without the fields that have rows of their own and the three
  fields that every state changes (`PER_STATE_FIELDS`). It is rewritten only when something in it changed,
  which most writes do not;
- `meta` row `coordination`: node id, write generation, current term, the count and checksum sum of the key
  rows and of the session rows, and the state's version, uuid and parent uuid. A term change writes only this
  row.

Earlier formats are read as they are, and their first write rewrites every row in the current format: format 1
kept the version and uuids in the `state` row (rewritten on every write), format 2 the sessions and which keys
are ephemeral (rewritten, whole, on every change of a session: about 1 MB a time with 10,000 sessions).

Format 4 (release 0.2.0) is format 3 whose `state` row holds fields that release 0.1.0 does not know and would
drop on loading them (`feature_gates.STATE_FIELD_GATES`: the nodes' versions, once the cluster's version has
moved to 0.2.0). A state without them is written in format 3, which 0.1.0 reads, so a node of a cluster that has
not moved yet can be rolled back. Its `format` value is a label that names the release that wrote it
(`formats.label`): release 0.1.0 refuses a format it does not know by printing that value, so its refusal
names the release to run instead. A format newer than this release knows is refused before anything else is
decoded (`StoreNewer`), and nothing is written.

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

from coordinated.coordination.feature_gates import STATE_FIELD_GATES
from coordinated.coordination.formats import label, newer_format_problem
from coordinated.coordination.formats import parse as parse_format
from coordinated.coordination.state import (
    ClusterState,
    Derivations,
    KeyVersion,
    Session,
    compute_diff,
    decode_state,
    encode_state,
)
from coordinated.release import installed_release

DB_FILE = "coordination-state.db"
FORMAT = "3"  # of a state without gated fields: what release 0.1.0 reads
GATED_FORMAT = 4  # of a state with gated fields, first written (and read) by GATED_FORMAT_RELEASE
GATED_FORMAT_RELEASE = "0.2.0"
NEWEST_FORMAT = GATED_FORMAT  # the newest this release reads
# The fields that every new state changes: kept in the `coordination` row (format 2), so that the `state` row
# is rewritten only when the rest of the state changes.
PER_STATE_FIELDS = ("version", "state_uuid", "parent_uuid")
# The fields the `state` row leaves out (the keys and sessions have their tables, PER_STATE_FIELDS the
# `coordination` row), with the empty values it holds in their place.
_STORED_ELSEWHERE: dict[str, Any] = {
    "kv": {},
    "kv_versions": {},
    "kv_sessions": {},
    "sessions": {},
    "version": 0,
    "state_uuid": "",
    "parent_uuid": None,
}
_CRC_MASK = (1 << 64) - 1
# Bound parameters per statement: well under SQLite's limit (32,766 since 3.32, 999 before).
_KEYS_PER_STATEMENT = 500

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value BLOB NOT NULL, crc INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL, crc INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, value BLOB NOT NULL, crc INTEGER NOT NULL) WITHOUT ROWID",
)


class StoreCorrupt(Exception):
    """The database cannot be read back as a record; the message says what is wrong."""


class StoreNewer(Exception):
    """The database is of a format newer than this release reads (`found`, its format value); `describe` names
    it and the release that wrote it. Nothing was written."""

    def __init__(self, found: object) -> None:
        super().__init__(self.describe("the database", found))
        self.found = found

    @staticmethod
    def describe(what: str, found: object) -> str:
        return newer_format_problem(what, found, NEWEST_FORMAT, installed_release()) or f"{what}: format [{found}]"


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
    # Format 3: the session rows.
    sessions_count: int = 0
    sessions_crc_sum: int = 0


class _KeyRow(msgspec.Struct, frozen=True, array_like=True, omit_defaults=True):
    """A key row: the value, its versions (None for a key written before keys carried versions) and, for an
    ephemeral key, its session (format 3; a persistent key's row is `[value, versions]`, as in format 2)."""

    value: Any
    versions: KeyVersion | None
    session: str | None = None


_ENCODER = msgspec.json.Encoder(order="sorted")
_ROW_DECODER = msgspec.json.Decoder(_KeyRow)
_SESSION_DECODER = msgspec.json.Decoder(Session)
_COORDINATION_DECODER = msgspec.json.Decoder(_Coordination)


class _FormatOnly(msgspec.Struct):
    format: Any = None


_FORMAT_DECODER = msgspec.json.Decoder(_FormatOnly)


def format_of(state: ClusterState) -> str:
    """The format a state is written in: FORMAT, or the gated format's label once it holds a gated field."""
    if all(getattr(state, name) is msgspec.UNSET for name in STATE_FIELD_GATES):
        return FORMAT
    return label(GATED_FORMAT, installed_release(), GATED_FORMAT_RELEASE)


def format_number(value: str) -> int:
    number = parse_format(value)[0]
    return number if number is not None else 0


def _crc(key: bytes, value: bytes) -> int:
    return zlib.crc32(value, zlib.crc32(key))


def encode_key_row(value: Any, versions: KeyVersion | None, session: str | None = None) -> bytes:
    return _ENCODER.encode(_KeyRow(value, versions, session))


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
    session_crcs: dict[str, int] = {}  # the same for the session rows
    format: str = FORMAT  # of the database read: an earlier one is rewritten whole by the next write


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
    try:  # the format first: a newer one may hold what this release cannot decode
        found = _FORMAT_DECODER.decode(meta["coordination"]).format
    except (msgspec.MsgspecError, RecursionError):
        found = None
    if found is not None and newer_format_problem("", found, NEWEST_FORMAT, "") is not None:
        raise StoreNewer(found)
    try:
        coordination = _COORDINATION_DECODER.decode(meta["coordination"])
        rest = decode_state(meta["state"])
    except msgspec.MsgspecError as error:
        raise StoreCorrupt(f"cannot decode: {error}") from None
    except RecursionError:
        raise StoreCorrupt("cannot decode: nested too deeply") from None
    number = format_number(coordination.format)
    if number < 1:
        raise StoreCorrupt(f"unknown format [{coordination.format}] (this version reads formats 1 to {NEWEST_FORMAT})")
    if number != 1:
        rest = rest.replace(**{name: getattr(coordination, name) for name in PER_STATE_FIELDS})
    kv: dict[str, Any] = {}
    kv_versions: dict[str, KeyVersion] = {}
    kv_sessions: dict[str, str] = {}
    key_crcs: dict[str, int] = {}
    key_summary = (coordination.kv_count, coordination.kv_crc_sum)
    for key, row in _checked_rows(conn, "kv", key_crcs, key_summary, _ROW_DECODER):
        kv[key] = row.value
        if row.versions is not None:
            kv_versions[key] = row.versions
        if row.session is not None:
            kv_sessions[key] = row.session
    fields: dict[str, Any] = {"kv": kv, "kv_versions": kv_versions}
    session_crcs: dict[str, int] = {}
    if number >= 3:  # earlier formats keep the sessions in the `state` row
        summary = (coordination.sessions_count, coordination.sessions_crc_sum)
        sessions = dict(_checked_rows(conn, "sessions", session_crcs, summary, _SESSION_DECODER))
        fields.update(sessions=sessions, kv_sessions=kv_sessions)
    return StoredRecord(
        node_id=coordination.node_id,
        generation=coordination.generation,
        current_term=coordination.current_term,
        # Built through the constructor, so that the state holds its maps in whatever form it keeps them.
        state=type(rest)(**{**msgspec.structs.asdict(rest), **fields}),
        kv_crc_sum=coordination.kv_crc_sum,
        fingerprint=f"{coordination.generation}:{_crc(b'', meta['coordination'])}:{_crc(b'', meta['state'])}",
        key_crcs=key_crcs,
        session_crcs=session_crcs,
        format=coordination.format,
    )


def _checked_rows(
    conn: sqlite3.Connection,
    table: str,
    crcs: dict[str, int],
    summary: tuple[int, int],
    decoder: msgspec.json.Decoder[Any],
) -> Iterator[tuple[str, Any]]:
    """Every row of a table of (name, value, crc), decoded, each CRC checked and kept in `crcs`; then the rows'
    count and CRC sum are checked against `summary`. Raises StoreCorrupt."""
    crc_sum = 0
    for name, value, crc in conn.execute(f"SELECT * FROM {table}"):
        if not isinstance(name, str) or not isinstance(value, bytes):
            raise StoreCorrupt(f"a row of the wrong type in table [{table}]")
        what = f"the row of key [{name}]" if table == "kv" else f"the row of [{name}] in table [{table}]"
        if _crc(name.encode(), value) != crc:
            raise StoreCorrupt(f"checksum mismatch in {what}")
        crc_sum += crc
        crcs[name] = crc
        try:
            decoded = decoder.decode(value)
        except msgspec.MsgspecError as error:
            raise StoreCorrupt(f"cannot decode {what}: {error}") from None
        except RecursionError:
            raise StoreCorrupt(f"cannot decode {what}: nested too deeply") from None
        yield name, decoded
    if (len(crcs), crc_sum & _CRC_MASK) != summary:
        rows = "key rows" if table == "kv" else f"rows of table [{table}]"
        raise StoreCorrupt(
            f"the {rows} do not match their summary ({len(crcs)} rows, the record says {summary[0]}, "
            "or their checksums differ): rows were lost or replaced"
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


class _Rows:
    """One table of `(name, value, crc)` rows as the store last committed it: the CRC of each row and their sum,
    so that a write subtracts a replaced row's CRC without reading the row back (a row missing from `crcs` is
    read back: see `_old_crc_sum`)."""

    def __init__(self, table: str, column: str, crcs: dict[str, int], crc_sum: int) -> None:
        self.table = table
        self.column = column  # the name's
        self.crcs = crcs
        self.crc_sum = crc_sum

    def stage(
        self, conn: sqlite3.Connection, rows: Iterable[tuple[str, bytes]], gone: set[str], full: bool, had: set[str]
    ) -> _Staged:
        """Writes `rows` (every row of the table when `full`) and deletes those of `gone`, within the caller's
        transaction; `had` names the rows that may exist now. Returns what to `commit` once it is durable."""
        staged = _Staged(self.crc_sum, full, gone)
        if full:
            conn.execute(f"DELETE FROM {self.table}")
            staged.crc_sum = 0
        else:
            staged.crc_sum -= self._old_crc_sum(conn, had)
            deleted = f"DELETE FROM {self.table} WHERE {self.column} IN ({{}}) RETURNING crc"
            staged.crc_sum -= _crc_sum_of(conn, deleted, gone)

        def checked() -> Iterator[tuple[str, bytes, int]]:
            # Streamed to executemany: after a full state arrives, its rows are not held all at once.
            for name, value in rows:
                crc = _crc(name.encode(), value)
                staged.crc_sum += crc
                staged.written += len(value)
                staged.crcs[name] = crc
                yield name, value, crc

        conn.executemany(f"INSERT OR REPLACE INTO {self.table} VALUES (?, ?, ?)", checked())
        staged.crc_sum &= _CRC_MASK
        return staged

    def commit(self, staged: _Staged) -> None:
        if staged.full:
            self.crcs = staged.crcs
        else:
            for name in staged.gone:
                self.crcs.pop(name, None)
            self.crcs.update(staged.crcs)
        self.crc_sum = staged.crc_sum

    def _old_crc_sum(self, conn: sqlite3.Connection, names: set[str]) -> int:
        """The sum of the CRCs of the rows `names` have now (0 for a name without a row). From `crcs`, which
        holds every row's CRC when the store was built from `read_record` or a full write; a name it lacks is
        read back, so that a store built otherwise keeps a correct sum."""
        total = 0
        unknown: set[str] = set()
        for name in names:
            crc = self.crcs.get(name)
            if crc is None:
                unknown.add(name)
            else:
                total += crc
        return total + _crc_sum_of(conn, f"SELECT crc FROM {self.table} WHERE {self.column} IN ({{}})", unknown)


class _Staged:
    """A table's rows as one write leaves them, until the write is durable."""

    def __init__(self, crc_sum: int, full: bool, gone: set[str]) -> None:
        self.crc_sum = crc_sum
        self.full = full
        self.gone = gone
        self.crcs: dict[str, int] = {}
        self.written = 0


def _crc_sum_of(conn: sqlite3.Connection, template: str, names: set[str]) -> int:
    """The sum of the CRCs that `template` (SQL returning `crc`, with `{}` for the list of names) gives for
    `names`, at most _KEYS_PER_STATEMENT names per statement; a name without a row adds 0."""
    total = 0
    listed = list(names)
    for start in range(0, len(listed), _KEYS_PER_STATEMENT):
        part = listed[start : start + _KEYS_PER_STATEMENT]
        for (crc,) in conn.execute(template.format(",".join("?" * len(part))), part):
            total += int(crc)
    return total


class StateStore:
    """Writes to an open database whose content is `record`; each write is one commit, durable when `write`
    returns, or (with `wal` given: a connection opened with `deferred_sync`) once a later `sync` returns."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        record: StoredRecord,
        wal: Path | None = None,
        derivations: Derivations | None = None,
    ) -> None:
        self.conn = conn
        self.derivations = derivations  # the node's, to diff the states it derived in proportion to the change
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
        self._keys = _Rows("kv", "key", record.key_crcs, record.kv_crc_sum)
        session_sum = sum(record.session_crcs.values()) & _CRC_MASK
        self._sessions = _Rows("sessions", "id", record.session_crcs, session_sum)
        # After a failed write, what reached the disk is unknown: the next write rewrites every row. A database
        # of an earlier format is rewritten whole in this one by the first write.
        self._full_write_needed = format_number(record.format) < 3
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
        keys = sessions = None
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                if full:
                    for statement in _SCHEMA:  # an earlier format may lack a table
                        self.conn.execute(statement)
                if state is not self.state or full:
                    keys, sessions = self._write_rows(state, full)
                    written += keys.written + sessions.written
                    if full or _rest_changed(self.state, state):
                        rest = _rest_of_state(state)
                        self._put_meta("state", rest)
                        written += len(rest)
                coordination = _ENCODER.encode(
                    _Coordination(
                        format_of(state),
                        self.node_id,
                        generation,
                        term,
                        len(state.kv),
                        keys.crc_sum if keys is not None else self._keys.crc_sum,
                        state.version,
                        state.state_uuid,
                        state.parent_uuid,
                        len(state.sessions),
                        sessions.crc_sum if sessions is not None else self._sessions.crc_sum,
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
        if keys is not None and sessions is not None:
            self._keys.commit(keys)
            self._sessions.commit(sessions)
        self._full_write_needed = False
        self.generation = generation
        self.current_term = term
        self.state = state
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

    def _write_rows(self, state: ClusterState, full: bool) -> tuple[_Staged, _Staged]:
        """Rows for the keys and sessions that changed (every row when `full`). A few statements per write
        whatever the number of rows: the deleted ones deleted, the new ones written with one executemany of
        INSERT OR REPLACE (half the CPU of a delete and an insert per key, measured)."""
        if full:
            changed_keys: Iterable[str] = state.kv
            changed_sessions: Iterable[str] = state.sessions
            gone_keys: set[str] = set()
            gone_sessions: set[str] = set()
        else:
            diff = compute_diff(self.state, state, self.derivations)
            touched = {
                *diff.kv.upserts,
                *diff.kv_versions.upserts,
                *diff.kv_versions.deletes,
                *diff.kv_sessions.upserts,
                *diff.kv_sessions.deletes,
            }
            gone_keys = set(diff.kv.deletes) | {key for key in touched if key not in state.kv}
            changed_keys = touched - gone_keys
            gone_sessions = {session for session in diff.sessions.deletes if session not in state.sessions}
            changed_sessions = set(diff.sessions.upserts)
        key_rows = (
            (key, encode_key_row(state.kv[key], state.kv_versions.get(key), state.kv_sessions.get(key)))
            for key in changed_keys
        )
        session_rows = ((session, _ENCODER.encode(state.sessions[session])) for session in changed_sessions)
        had_keys = {key for key in changed_keys if key in self.state.kv} if not full else set()
        had_sessions = (
            {session for session in changed_sessions if session in self.state.sessions} if not full else set()
        )
        keys = self._keys.stage(self.conn, key_rows, gone_keys, full, had_keys)
        sessions = self._sessions.stage(self.conn, session_rows, gone_sessions, full, had_sessions)
        return keys, sessions

    def close(self) -> None:
        """Closes the database; the caller makes sure no `sync` is running."""
        if self._wal_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._wal_fd)
            self._wal_fd = -1
        with contextlib.suppress(sqlite3.Error):
            self.conn.close()
