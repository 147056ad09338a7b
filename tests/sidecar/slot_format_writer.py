"""The slot-file persistence of earlier versions, kept verbatim (but for this docstring) as a test fixture: it
writes data directories exactly as a node of that version did, so the migration is tested on real files.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import secrets
import struct
from pathlib import Path

import msgspec

from coordinated.coordination.recovery import (
    LoadRecord,
    Record,
    Refuse,
    SlotReading,
    StartFresh,
    StorageView,
    decide_startup,
)
from coordinated.coordination.state import ClusterState, encode_state, initial_state
from coordinated.sidecar.events.history import summarize_history

MAGIC = b"COORDINATED1"
SLOT_MAGIC = b"COORDINATED2"
SLOT_FILES = ("coordination-state.0", "coordination-state.1")
LEGACY_STATE_FILE = "coordination-state.dat"
NODE_ID_FILE = "node-id.dat"
LOCK_FILE = "node.lock"
HOOKS_FILE = "hooks.json"
HISTORY_DIR = "history"

# Slot record header: magic, write generation (u64), payload length (u64), then sha256(fields + payload).
_SLOT_FIELDS = struct.Struct(">12sQQ")
_DIGEST_SIZE = hashlib.sha256().digest_size
SLOT_HEADER_SIZE = _SLOT_FIELDS.size + _DIGEST_SIZE

log = logging.getLogger("coordinated.persistence")


class DataDirError(Exception):
    """The data directory cannot be used; the message names the file and what is wrong."""


def atomic_write(path: Path, payload: bytes) -> None:
    """Write `MAGIC sha256 length\\n payload` so that readers see the old file or the new one, never a mix."""
    header = b"%s %s %d\n" % (MAGIC, hashlib.sha256(payload).hexdigest().encode(), len(payload))
    _replace_file(path, header + payload)
    fsync_dir(path.parent)


def _replace_file(path: Path, data: bytes) -> None:
    """Write a temp file, fsync it and rename it over `path`; the caller fsyncs the directory."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def fsync_dir(path: Path) -> None:
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _write_all(fd: int, data: bytes) -> None:
    """Write `data` at the start of the file, however many calls that takes."""
    view = memoryview(data)
    offset = 0
    while offset < len(data):
        offset += os.pwrite(fd, view[offset:], offset)


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise DataDirError(f"cannot read [{path}]: {error.strerror or error}") from None


def read_checked(path: Path) -> bytes:
    """The payload of a file written by `atomic_write`; raises DataDirError saying what is wrong."""
    data = _read_file(path)
    header, sep, payload = data.partition(b"\n")
    parts = header.split(b" ")
    if not sep or len(parts) != 3 or parts[0] != MAGIC:
        raise DataDirError(f"[{path}] is corrupt: missing or malformed header (expected {MAGIC.decode()} ...)")
    try:
        length = int(parts[2])
    except ValueError:
        raise DataDirError(f"[{path}] is corrupt: malformed length in header") from None
    if len(payload) != length:
        raise DataDirError(f"[{path}] is corrupt: truncated, {len(payload)} of {length} payload bytes")
    if hashlib.sha256(payload).hexdigest().encode() != parts[1]:
        raise DataDirError(f"[{path}] is corrupt: checksum mismatch")
    return payload


def encode_slot_record(generation: int, payload: bytes) -> bytes:
    """One slot record: header (magic, generation, length, sha256 of those fields and the payload), payload."""
    fields = _SLOT_FIELDS.pack(SLOT_MAGIC, generation, len(payload))
    digest = hashlib.sha256(fields)
    digest.update(payload)
    return b"".join((fields, digest.digest(), payload))


def _read_slot(path: Path, cluster_name: str) -> SlotReading:
    """What one slot file holds, for `decide_startup`; a record that passes its checksum but cannot be decoded
    is not a torn write but a bug or a foreign file, so it stops the node at once."""
    name = f"[{path}]"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return SlotReading(name, "missing")
    except OSError as error:
        raise DataDirError(f"cannot read [{path}]: {error.strerror or error}") from None
    if not data:
        return SlotReading(name, "empty")
    if len(data) < SLOT_HEADER_SIZE:
        return SlotReading(name, "damaged", f"truncated header, {len(data)} of {SLOT_HEADER_SIZE} bytes")
    magic, generation, length = _SLOT_FIELDS.unpack_from(data)
    if magic != SLOT_MAGIC:
        return SlotReading(name, "damaged", f"malformed header (expected {SLOT_MAGIC.decode()})")
    available = len(data) - SLOT_HEADER_SIZE
    if length > available:
        return SlotReading(name, "damaged", f"truncated, {available} of {length} payload bytes")
    payload = data[SLOT_HEADER_SIZE : SLOT_HEADER_SIZE + length]
    digest = hashlib.sha256(data[: _SLOT_FIELDS.size])
    digest.update(payload)
    if digest.digest() != data[_SLOT_FIELDS.size : SLOT_HEADER_SIZE]:
        return SlotReading(name, "damaged", "checksum mismatch")
    # Bytes after the record are ignored: only a crash between pwrite and ftruncate leaves any.
    loaded = _decode_state_file(path, payload)
    return SlotReading(name, "valid", record=_summary(loaded, generation, digest.hexdigest(), cluster_name))


def _summary(loaded: _StateFile, generation: int, fingerprint: str, cluster_name: str) -> Record:
    state = loaded.last_accepted_state
    return Record(
        generation=generation,
        current_term=loaded.current_term,
        accepted=(state.term, state.version),
        cluster_name=state.cluster_name,
        node_id=loaded.node_id,
        fingerprint=fingerprint,
        initial=loaded.current_term == 0 and state == initial_state(cluster_name),
    )


class _StateFile(msgspec.Struct):
    current_term: int
    last_accepted_state: ClusterState
    node_id: str | None = None  # absent in records written by earlier versions


_STATE_DECODER = msgspec.json.Decoder(_StateFile)


def _decode_state_file(path: Path, payload: bytes) -> _StateFile:
    try:
        return _STATE_DECODER.decode(payload)
    except msgspec.MsgspecError as error:
        raise DataDirError(f"[{path}] is corrupt: {error}") from None


def _payload(node_id: str, term: int, state_bytes: bytes) -> bytes:
    # Builds the JSON around the cached state encoding: a term change does not re-encode the state.
    return b'{"node_id":"%s","current_term":%d,"last_accepted_state":%s}' % (node_id.encode(), term, state_bytes)


def _read_node_id(path: Path) -> str | None:
    if not path.exists():
        return None
    node_id = read_checked(path).decode("utf-8", "replace").strip()
    if not node_id or not node_id.isalnum():
        raise DataDirError(f"[{path}] is corrupt: not a node id")
    return node_id


def survey_data_dir(data_dir: Path, cluster_name: str) -> StorageView:
    """Everything in the data directory that tells whether and how it was used, for `decide_startup`."""
    node_id_path = data_dir / NODE_ID_FILE
    legacy_path = data_dir / LEGACY_STATE_FILE
    legacy: SlotReading | None = None
    if legacy_path.exists():
        try:
            loaded = _decode_state_file(legacy_path, read_checked(legacy_path))
            legacy = SlotReading(f"[{legacy_path}]", "valid", record=_summary(loaded, 0, "legacy", cluster_name))
        except DataDirError as error:
            legacy = SlotReading(
                f"[{legacy_path}]", "damaged", str(error).removeprefix(f"[{legacy_path}] is corrupt: ")
            )
    hooks = data_dir / HOOKS_FILE
    return StorageView(
        cluster_name=cluster_name,
        node_id=_read_node_id(node_id_path),
        node_id_name=f"[{node_id_path}]",
        slots=tuple(_read_slot(data_dir / name, cluster_name) for name in SLOT_FILES),
        history=summarize_history(data_dir / HISTORY_DIR),
        legacy=legacy,
        others=(f"[{hooks}] holds registered hooks",) if hooks.exists() else (),
    )


def stored_cluster_name(data_dir: Path) -> str | None:
    """The cluster name in the newest valid slot record, or None when no slot holds one (for tools that are
    not given the node's settings)."""
    readings = [_read_slot(data_dir / name, "") for name in SLOT_FILES]
    valid = [reading.record for reading in readings if reading.record is not None]
    if not valid:
        return None
    return max(valid, key=lambda record: record.generation).cluster_name


class FilePersistedState:
    """The core's `PersistedState`: term and state in one record, so that they can never disagree on disk.

    Opening it decides, by `decide_startup`, whether the directory starts fresh, loads a record, or refuses
    (DataDirError naming each file and what it holds). On a fresh start the first record is written before the
    node id file, so that a crash in between leaves a directory that is recognisably unused.
    """

    def __init__(self, data_dir: Path, cluster_name: str) -> None:
        self.data_dir = data_dir
        self.paths = tuple(data_dir / name for name in SLOT_FILES)
        self.bytes_written = 0
        self.warnings: tuple[str, ...] = ()
        self.writes = 0
        self._fds: list[int] = []
        try:
            self._load(cluster_name)
        except BaseException:
            self.close()
            raise

    def _load(self, cluster_name: str) -> None:
        view = survey_data_dir(self.data_dir, cluster_name)
        self.history_summary = view.history
        decision = decide_startup(view)
        if isinstance(decision, Refuse):
            raise DataDirError(decision.reason)
        legacy = self.data_dir / LEGACY_STATE_FILE
        write_node_id = view.node_id is None
        self.node_id = view.node_id or secrets.token_hex(8)
        if isinstance(decision, StartFresh):
            self._install_first_record(_payload(self.node_id, 0, encode_state(initial_state(cluster_name))))
        elif decision.reading is view.legacy:
            # The first start after an upgrade: the legacy file is removed below, once slot 0 is durable.
            loaded = _decode_state_file(legacy, read_checked(legacy))
            self._install_first_record(
                _payload(self.node_id, loaded.current_term, encode_state(loaded.last_accepted_state))
            )
        self.warnings = decision.warnings if isinstance(decision, LoadRecord) else ()
        for warning in self.warnings:
            log.warning("%s", warning)
        sync_dir = False
        for path in self.paths:
            try:
                try:
                    fd = os.open(path, os.O_RDWR)
                except FileNotFoundError:
                    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
                    sync_dir = True
            except OSError as error:
                raise DataDirError(f"cannot open [{path}]: {error.strerror or error}") from None
            self._fds.append(fd)
        if sync_dir:
            fsync_dir(self.data_dir)
        contents = [_read_file(path) for path in self.paths]
        # Bytes that may be in each slot file, so that a shrinking write knows to truncate.
        self._sizes = [len(data) for data in contents]
        readings = [_read_slot(path, cluster_name) for path in self.paths]
        newest = max(
            (index for index, reading in enumerate(readings) if reading.record is not None),
            key=lambda index: _generation_of(readings[index]),
        )
        payload = contents[newest][SLOT_HEADER_SIZE:]
        loaded = _decode_state_file(self.paths[newest], payload[: _SLOT_FIELDS.unpack_from(contents[newest])[2]])
        self._term = loaded.current_term
        self._state = loaded.last_accepted_state
        self._state_bytes = encode_state(self._state)
        self._generation = _generation_of(readings[newest])
        self._newest = newest  # the slot holding the newest valid record
        if write_node_id:
            atomic_write(self.data_dir / NODE_ID_FILE, self.node_id.encode())
        if legacy.exists():
            log.info("removing [%s]: [%s] holds its content or a newer state", legacy, self.paths[newest])
            self._remove_legacy(legacy)

    def _install_first_record(self, payload: bytes) -> None:
        """Slot 0 gets the first record by rename, so a slot file never holds only a torn first record; slot 1
        is emptied (it can hold at most an initial record left by an interrupted first start)."""
        try:
            _replace_file(self.paths[0], encode_slot_record(1, payload))
            if _file_size(self.paths[1]):
                os.truncate(self.paths[1], 0)
                with open(self.paths[1], "rb+") as slot1:
                    os.fsync(slot1.fileno())
            fsync_dir(self.data_dir)
        except OSError as error:
            raise DataDirError(f"cannot write [{self.paths[0]}]: {error.strerror or error}") from None

    def _remove_legacy(self, legacy: Path) -> None:
        try:
            legacy.unlink(missing_ok=True)
            fsync_dir(self.data_dir)
        except OSError as error:
            raise DataDirError(f"cannot remove [{legacy}]: {error.strerror or error}") from None

    @property
    def current_term(self) -> int:
        return self._term

    @property
    def last_accepted_state(self) -> ClusterState:
        return self._state

    def replace_record(self, term: int, state: ClusterState) -> None:
        """Term and state in one durable write (the offline tool's, which changes both at once)."""
        state_bytes = encode_state(state)
        self._write(term, state_bytes)
        self._term = term
        self._state = state
        self._state_bytes = state_bytes

    def set_current_term(self, term: int) -> None:
        self._write(term, self._state_bytes)
        self._term = term

    def set_last_accepted_state(self, state: ClusterState) -> None:
        state_bytes = encode_state(state)
        self._write(self._term, state_bytes)
        self._state = state
        self._state_bytes = state_bytes

    def _write(self, term: int, state_bytes: bytes) -> None:
        if len(self._fds) != len(SLOT_FILES):
            raise ValueError("the persisted state is closed")
        payload = _payload(self.node_id, term, state_bytes)
        # Never overwrite the newest durable record: a torn write then destroys only the older copy. After a
        # failed write the same slot is the target again, and the generation is reused.
        target = 1 - self._newest
        generation = self._generation + 1
        record = encode_slot_record(generation, payload)
        fd = self._fds[target]
        self._sizes[target] = max(self._sizes[target], len(record))
        _write_all(fd, record)
        if self._sizes[target] > len(record):
            os.ftruncate(fd, len(record))
            self._sizes[target] = len(record)
        # fdatasync also flushes the file size, which reading the record back needs.
        getattr(os, "fdatasync", os.fsync)(fd)
        self._generation = generation
        self._newest = target
        self.bytes_written += len(payload)
        self.writes += 1

    def close(self) -> None:
        """Closes the slot files; later writes raise. Idempotent."""
        fds, self._fds = self._fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def _generation_of(reading: SlotReading) -> int:
    assert reading.record is not None
    return reading.record.generation


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


class DataDirLock:
    """An exclusive lock, so that two nodes never share a data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._fd)
            raise DataDirError(f"[{data_dir}] is in use by another node (cannot lock [{self.path}])") from None

    def release(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)


def prepare_data_dir(data_dir: Path) -> None:
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        (data_dir / "history").mkdir(exist_ok=True)
    except OSError as error:
        raise DataDirError(f"cannot create data directory [{data_dir}]: {error.strerror or error}") from None
    if not os.access(data_dir, os.W_OK):
        raise DataDirError(f"data directory [{data_dir}] is not writable")
