"""Durable node identity, current term and last-accepted state in the data directory.

Term and state live in `coordination-state.db`, a SQLite database that `state_store` writes in proportion to
each change (one row per key, one for the rest of the state, one for the term): see there for the format and
why a crash leaves the last commit or the one before. The term is durable before a Join is sent and the
accepted state before it is acknowledged, because each setter returns only after its commit is fsynced, or,
with `deferred_sync` (`persistence.sync: background`), because the node holds back everything it does after a
write until `sync` has made that write durable (`group_commit`).

What the node loads at startup, or why it refuses, is decided by `coordination.recovery.decide_startup` from a
survey of the whole directory (database, node id, history, hooks, and the slot files of earlier versions):
the database's record, unless the history proves that a newer one was acknowledged, or the files disagree on
whose they are. A data directory of an earlier version (the slot files `coordination-state.0`/`.1`, or a
`coordination-state.dat`) is judged by the same rule as before and migrated on the first start: the database
is built beside it and renamed into place, and only then are the old files removed, so a crash at any point
leaves either the old files or the complete database. The first record, too, reaches the database file by
rename, and is durable before the node id file is written. The rarely written node id keeps its own file
(`atomic_write`: temp file, fsync, rename, directory fsync, one-line checksummed header).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from coordinated.coordination.recovery import (
    HistorySummary,
    LoadRecord,
    Record,
    Refuse,
    SlotReading,
    StartFresh,
    StorageView,
    decide_startup,
)
from coordinated.coordination.state import ClusterState, Derivations, initial_state
from coordinated.sidecar.storage.durable_files import DataDirError, atomic_write, fsync_dir, read_checked
from coordinated.sidecar.storage.file_watch import FileWatch
from coordinated.sidecar.storage.slot_files import LEGACY_STATE_FILE, SLOT_FILES, StateFile, read_legacy, read_slot
from coordinated.sidecar.storage.state_store import (
    DB_FILE,
    StateStore,
    StorageWriteError,
    StoreCorrupt,
    StoredRecord,
    StoreNewer,
    connect,
    crash_point,
    create_database,
    read_record,
    remove_database_files,
)

__all__ = ["DataDirError", "atomic_write", "fsync_dir", "read_checked"]

NODE_ID_FILE = "node-id.dat"
LOCK_FILE = "node.lock"
HOOKS_FILE = "hooks.json"
HISTORY_DIR = "history"
# What the node's history proves, read from its folder, or why it cannot be read (a newer format). The history
# owns its format: whoever opens the store hands its reader in (`events.history_read.read_history_summary`).
HistoryReader = Callable[[Path], HistorySummary | str]
WAL_SUFFIX = "-wal"

log = logging.getLogger("coordinated.persistence")


def _read_node_id(path: Path) -> str | None:
    if not path.exists():
        return None
    node_id = read_checked(path).decode("utf-8", "replace").strip()
    if not node_id or not node_id.isalnum():
        raise DataDirError(f"[{path}] is corrupt: not a node id")
    return node_id


@dataclass
class _Survey:
    view: StorageView
    database: bool  # the directory holds the database (or its WAL): the slot files are not consulted
    record: StoredRecord | None = None  # the database's record, when valid
    old_records: dict[str, StateFile] = field(default_factory=dict)  # slot or legacy file name -> its content


def _read_database(path: Path, cluster_name: str) -> tuple[SlotReading, StoredRecord | None]:
    wal = path.with_name(path.name + WAL_SUFFIX)
    has_wal = _file_size(wal) > 0
    name = f"[{path}] (with its write-ahead log [{wal}])" if has_wal else f"[{path}]"
    if not path.exists():
        return SlotReading(name, "missing"), None
    if _file_size(path) == 0:
        return SlotReading(name, "empty"), None
    conn: sqlite3.Connection | None = None
    try:
        conn = connect(path, read_only=True)
        stored = read_record(conn)
    except StoreNewer as newer:
        raise DataDirError(StoreNewer.describe(name, newer.found)) from None
    except (sqlite3.Error, StoreCorrupt) as error:
        return SlotReading(name, "damaged", str(error)), None
    finally:
        if conn is not None:
            conn.close()
    state = stored.state
    record = Record(
        generation=stored.generation,
        current_term=stored.current_term,
        accepted=(state.term, state.version),
        cluster_name=state.cluster_name,
        node_id=stored.node_id,
        fingerprint=stored.fingerprint,
        initial=stored.current_term == 0 and state == initial_state(cluster_name),
    )
    return SlotReading(name, "valid", record=record), stored


def _survey(data_dir: Path, cluster_name: str, read_history: HistoryReader) -> _Survey:
    node_id_path = data_dir / NODE_ID_FILE
    db = data_dir / DB_FILE
    wal = db.with_name(db.name + WAL_SUFFIX)
    others = []
    hooks = data_dir / HOOKS_FILE
    if hooks.exists():
        others.append(f"[{hooks}] holds registered hooks")
    node_id = _read_node_id(node_id_path)
    history = read_history(data_dir / HISTORY_DIR)
    if isinstance(history, str):
        raise DataDirError(history)

    def view(slots: tuple[SlotReading, ...], legacy: SlotReading | None = None) -> StorageView:
        return StorageView(
            cluster_name=cluster_name,
            node_id=node_id,
            node_id_name=f"[{node_id_path}]",
            slots=slots,
            history=history,
            legacy=legacy,
            others=tuple(others),
        )

    old_files = [data_dir / name for name in (*SLOT_FILES, LEGACY_STATE_FILE)]
    if db.exists() or wal.exists() or not any(path.exists() for path in old_files):
        reading, stored = _read_database(db, cluster_name)
        if reading.kind == "missing" and wal.exists():
            others.append(f"[{wal}] holds a write-ahead log without its database")
        if reading.kind != "valid":
            # Left by an interrupted migration, they may be the only copy the operator still has: name them.
            others.extend(
                f"[{data_dir / name}] (a state file of an earlier version) is present"
                for name in (*SLOT_FILES, LEGACY_STATE_FILE)
                if (data_dir / name).exists()
            )
        return _Survey(view((reading,)), database=True, record=stored)
    old: dict[str, StateFile] = {}
    slots = []
    for slot_name in SLOT_FILES:
        reading, loaded = read_slot(data_dir / slot_name, cluster_name)
        slots.append(reading)
        if loaded is not None:
            old[reading.name] = loaded
    legacy = read_legacy(data_dir / LEGACY_STATE_FILE, cluster_name)
    legacy_reading = None
    if legacy is not None:
        legacy_reading, loaded = legacy
        if loaded is not None:
            old[legacy_reading.name] = loaded
    return _Survey(view(tuple(slots), legacy_reading), database=False, old_records=old)


def survey_data_dir(data_dir: Path, cluster_name: str, read_history: HistoryReader) -> StorageView:
    """Everything in the data directory that tells whether and how it was used, for `decide_startup`."""
    return _survey(data_dir, cluster_name, read_history).view


def stored_cluster_name(data_dir: Path, read_history: HistoryReader) -> str | None:
    """The cluster name in the stored record (the database, or the newest slot of an earlier version), or None
    when there is none (for tools that are not given the node's settings)."""
    survey = _survey(data_dir, "", read_history)
    valid = [reading.record for reading in survey.view.slots if reading.record is not None]
    if not valid:
        return None
    return max(valid, key=lambda record: record.generation).cluster_name


class FilePersistedState:
    """The core's `PersistedState`: term and state in one database, so that they can never disagree on disk.

    Opening it decides, by `decide_startup`, whether the directory starts fresh, loads the record, or refuses
    (DataDirError naming each file and what it holds). On a fresh start the first record is written before the
    node id file, so that a crash in between leaves a directory that is recognisably unused.
    """

    def __init__(
        self,
        data_dir: Path,
        cluster_name: str,
        deferred_sync: bool = False,
        derivations: Derivations | None = None,
        *,
        read_history: HistoryReader,
    ) -> None:
        self.data_dir = data_dir
        self.read_history = read_history
        self.derivations = derivations  # the node's: a write then costs in proportion to the change
        self.deferred_sync = deferred_sync
        self.path = data_dir / DB_FILE
        self.warnings: tuple[str, ...] = ()
        self._store: StateStore | None = None
        self._closed = False
        self.files = FileWatch()
        try:
            self._load(cluster_name)
        except BaseException:
            self.close()
            raise

    def _load(self, cluster_name: str) -> None:
        remove_database_files(self.path.with_name(self.path.name + ".tmp"))  # an interrupted creation's
        survey = _survey(self.data_dir, cluster_name, self.read_history)
        view = survey.view
        self.history_summary = view.history
        decision = decide_startup(view)
        if isinstance(decision, Refuse):
            raise DataDirError(decision.reason)
        write_node_id = view.node_id is None
        self.node_id = view.node_id or secrets.token_hex(8)
        self.warnings = decision.warnings if isinstance(decision, LoadRecord) else ()
        for warning in self.warnings:
            log.warning("%s", warning)
        if isinstance(decision, LoadRecord) and survey.database:
            assert survey.record is not None
            # The record just read under the data-dir lock: nothing else writes the database.
            record = survey.record
            try:
                conn = connect(self.path, deferred_sync=self.deferred_sync)
            except sqlite3.Error as error:
                raise DataDirError(f"cannot open [{self.path}]: {error}") from None
        else:
            if isinstance(decision, StartFresh):
                term, state, generation = 0, initial_state(cluster_name), 1
            else:
                loaded = survey.old_records[decision.reading.name]
                assert decision.reading.record is not None
                term, state = loaded.current_term, loaded.last_accepted_state
                generation = max(decision.reading.record.generation, 1)
                log.info("migrating %s into [%s]", decision.reading.describe(), self.path)
            self._create(generation, term, state)
            conn, record = self._open_created()
        # The connection has created the WAL file; its directory entry must be durable before any commit in it
        # is relied on.
        fsync_dir(self.data_dir)
        wal = self.path.with_name(self.path.name + WAL_SUFFIX)
        self._store = StateStore(conn, record, wal=wal if self.deferred_sync else None, derivations=self.derivations)
        # The files the store writes, as they are now: deleting or replacing one while the node runs is noticed.
        self.files.watch(self.path, "the database")
        with contextlib.suppress(FileNotFoundError):
            self.files.watch(wal, "the database's WAL")
        if write_node_id:
            atomic_write(self.data_dir / NODE_ID_FILE, self.node_id.encode())
        self._remove_old_files()

    def _create(self, generation: int, term: int, state: ClusterState) -> None:
        try:
            remove_database_files(self.path)  # a fresh start may replace an initial record without a node id
            create_database(self.path, self.node_id, generation, term, state)
            fsync_dir(self.data_dir)
        except (OSError, sqlite3.Error) as error:
            raise DataDirError(f"cannot write [{self.path}]: {error}") from None
        crash_point("create:renamed")

    def _open_created(self) -> tuple[sqlite3.Connection, StoredRecord]:
        conn = connect(self.path, deferred_sync=self.deferred_sync)
        try:
            return conn, read_record(conn)
        except (sqlite3.Error, StoreCorrupt) as error:
            conn.close()
            raise DataDirError(f"[{self.path}] is corrupt right after it was written: {error}") from None

    def _remove_old_files(self) -> None:
        """The state files of earlier versions, once the database holds their record (or a newer one)."""
        old = [self.data_dir / name for name in (*SLOT_FILES, LEGACY_STATE_FILE) if (self.data_dir / name).exists()]
        if not old:
            return
        log.info("removing %s: [%s] holds their content or a newer state", [str(path) for path in old], self.path)
        try:
            for path in old:
                path.unlink()
            fsync_dir(self.data_dir)
        except OSError as error:
            raise DataDirError(f"cannot remove a state file of an earlier version: {error}") from None

    def _open_store(self) -> StateStore:
        if self._store is None:
            raise ValueError("the persisted state is closed")
        return self._store

    @property
    def current_term(self) -> int:
        return self._open_store().current_term

    @property
    def last_accepted_state(self) -> ClusterState:
        return self._open_store().state

    @property
    def bytes_written(self) -> int:
        return self._store.bytes_written if self._store is not None else 0

    @property
    def writes(self) -> int:
        return self._store.writes if self._store is not None else 0

    @property
    def staged(self) -> int:
        """Writes committed so far (with `deferred_sync`, not all of them durable yet: see `synced`)."""
        return self._store.staged if self._store is not None else 0

    @property
    def synced(self) -> int:
        """Of `staged`, the writes known to be durable."""
        return self._store.synced if self._store is not None else 0

    def sync(self) -> None:
        """Makes every write committed so far durable (a no-op without `deferred_sync`); callable from a thread.
        Raises OSError, after which every write is refused (see `state_store`)."""
        self._open_store().sync()

    def replace_record(self, term: int, state: ClusterState) -> None:
        """Term and state in one durable write that rewrites every row (the offline tool's)."""
        store = self._open_store()
        store.write(term, state, full=True)
        store.sync()

    def set_current_term(self, term: int) -> None:
        store = self._writable_store()
        store.write(term, store.state)

    def set_last_accepted_state(self, state: ClusterState) -> None:
        store = self._writable_store()
        store.write(store.current_term, state)

    def _writable_store(self) -> StateStore:
        """The store, unless one of its files was deleted or replaced under it: a commit would then go to a file
        that the next start does not read, so it is refused as a failed write is (fail closed, until a restart
        judges the directory)."""
        store = self._open_store()
        lost = self.files.problems()
        if lost:
            raise StorageWriteError(
                "cannot persist: " + "; ".join(problem.describe() for problem in lost) + " (restart the node: its "
                "startup checks decide whether it can go on from what is left)"
            )
        return store

    def close(self) -> None:
        """Closes the database; later writes raise. Idempotent."""
        store, self._store = self._store, None
        if store is not None:
            store.close()


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


class DataDirLock:
    """An exclusive lock, so that two nodes never share a data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self.fd)
            raise DataDirError(f"[{data_dir}] is in use by another node (cannot lock [{self.path}])") from None

    def release(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def prepare_data_dir(data_dir: Path) -> None:
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        (data_dir / "history").mkdir(exist_ok=True)
    except OSError as error:
        raise DataDirError(f"cannot create data directory [{data_dir}]: {error.strerror or error}") from None
    if not os.access(data_dir, os.W_OK):
        raise DataDirError(f"data directory [{data_dir}] is not writable")
