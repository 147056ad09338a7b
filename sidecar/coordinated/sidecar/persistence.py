"""Durable node identity, current term and last-accepted state in the data directory.

Term and last-accepted state are written before every Join and every publish ack, so they avoid the cost of
a rename: they live in two slot files, `coordination-state.0` and `.1`, created once and kept open. A write
puts one record in place (`pwrite` at offset 0, `ftruncate` if it shrank, `fdatasync`) into the slot that
does not hold the newest valid record, so a torn write can only destroy the older copy. A record is a 60-byte
header (magic `COORDINATED2`, u64 write generation, u64 payload length, sha256 of those fields and the
payload; big-endian) followed by the JSON `{"current_term", "last_accepted_state"}`. At startup the valid
slot with the highest generation wins; a damaged slot beside a valid one is a write that a crash interrupted
before it was acknowledged. The first record (fresh, or migrated from the single `coordination-state.dat` of
earlier versions) reaches slot 0 by temp file and rename, so a slot file never holds only a torn record. If
no slot holds a valid record, the node stops with a DataDirError naming both files: silently resetting the
term or the state could let a node vote twice in a term or forget a committed state. The rarely written node
id keeps the older format (`atomic_write`: temp file, fsync, rename, directory fsync, one-line checksummed
header).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import secrets
import struct
from dataclasses import dataclass
from pathlib import Path

import msgspec

from coordinated.coordination.state import ClusterState, encode_state, initial_state

MAGIC = b"COORDINATED1"
SLOT_MAGIC = b"COORDINATED2"
SLOT_FILES = ("coordination-state.0", "coordination-state.1")
LEGACY_STATE_FILE = "coordination-state.dat"
NODE_ID_FILE = "node-id.dat"
LOCK_FILE = "node.lock"

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


@dataclass(frozen=True)
class _Slot:
    """What one slot file holds: a valid record (`payload` set), a damaged one (`problem` set), or nothing."""

    path: Path
    generation: int = 0
    payload: bytes | None = None
    problem: str | None = None


def _check_slot(path: Path, data: bytes) -> _Slot:
    if not data:
        return _Slot(path)
    if len(data) < SLOT_HEADER_SIZE:
        return _Slot(path, problem=f"truncated header, {len(data)} of {SLOT_HEADER_SIZE} bytes")
    magic, generation, length = _SLOT_FIELDS.unpack_from(data)
    if magic != SLOT_MAGIC:
        return _Slot(path, problem=f"malformed header (expected {SLOT_MAGIC.decode()})")
    available = len(data) - SLOT_HEADER_SIZE
    if length > available:
        return _Slot(path, problem=f"truncated, {available} of {length} payload bytes")
    payload = data[SLOT_HEADER_SIZE : SLOT_HEADER_SIZE + length]
    digest = hashlib.sha256(data[: _SLOT_FIELDS.size])
    digest.update(payload)
    if digest.digest() != data[_SLOT_FIELDS.size : SLOT_HEADER_SIZE]:
        return _Slot(path, problem="checksum mismatch")
    # Bytes after the record are ignored: only a crash between pwrite and ftruncate leaves any.
    return _Slot(path, generation=generation, payload=payload)


class _StateFile(msgspec.Struct):
    current_term: int
    last_accepted_state: ClusterState


_STATE_DECODER = msgspec.json.Decoder(_StateFile)


def _decode_state_file(path: Path, payload: bytes, cluster_name: str) -> _StateFile:
    try:
        loaded = _STATE_DECODER.decode(payload)
    except msgspec.MsgspecError as error:
        raise DataDirError(f"[{path}] is corrupt: {error}") from None
    if loaded.last_accepted_state.cluster_name != cluster_name:
        raise DataDirError(
            f"[{path}] holds a state of cluster [{loaded.last_accepted_state.cluster_name}], "
            f"but cluster.name is [{cluster_name}]"
        )
    return loaded


def _payload(term: int, state_bytes: bytes) -> bytes:
    # Builds the JSON around the cached state encoding: a term change does not re-encode the state.
    return b'{"current_term":%d,"last_accepted_state":%s}' % (term, state_bytes)


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


class FilePersistedState:
    """The core's `PersistedState`: term and state in one record, so that they can never disagree on disk."""

    def __init__(self, data_dir: Path, cluster_name: str) -> None:
        self.data_dir = data_dir
        self.paths = tuple(data_dir / name for name in SLOT_FILES)
        self.bytes_written = 0
        self.damaged_slot: str | None = None  # set when a damaged slot was passed over at startup
        self.writes = 0
        self._fds: list[int] = []
        try:
            self._load(cluster_name)
        except BaseException:
            self.close()
            raise

    def _load(self, cluster_name: str) -> None:
        legacy = self.data_dir / LEGACY_STATE_FILE
        sync_dir = False
        if not any(_file_size(path) for path in self.paths):
            # A new data directory, or the first start after an upgrade: slot 0 gets its first record by rename,
            # so that a slot file either does not exist or holds a valid record until slot 1 is first written.
            # The legacy file is removed below, once the slot is durable.
            if legacy.exists():
                loaded = _decode_state_file(legacy, read_checked(legacy), cluster_name)
                payload = _payload(loaded.current_term, encode_state(loaded.last_accepted_state))
            else:
                payload = _payload(0, encode_state(initial_state(cluster_name)))
            try:
                _replace_file(self.paths[0], encode_slot_record(1, payload))
            except OSError as error:
                raise DataDirError(f"cannot write [{self.paths[0]}]: {error.strerror or error}") from None
            sync_dir = True
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
        slots = [_check_slot(path, data) for path, data in zip(self.paths, contents, strict=True)]
        # Bytes that may be in each slot file, so that a shrinking write knows to truncate.
        self._sizes = [len(data) for data in contents]
        valid = [slot for slot in slots if slot.payload is not None]
        if not valid:
            problems = "; ".join(
                f"[{slot.path}] is corrupt: {slot.problem}" if slot.problem else f"[{slot.path}] holds no record"
                for slot in slots
            )
            extra = f"; [{legacy}] exists but is older than the slots" if legacy.exists() else ""
            raise DataDirError(f"no valid coordination state: {problems}{extra}; refusing to reset it")
        newest = max(valid, key=lambda slot: slot.generation)
        if len(valid) == 2 and valid[0].generation == valid[1].generation and valid[0].payload != valid[1].payload:
            raise DataDirError(
                f"[{valid[0].path}] and [{valid[1].path}] are corrupt: "
                f"different records with the same generation {newest.generation}"
            )
        # A damaged slot beside a valid one is normally a write that a crash interrupted before it was
        # acknowledged. It could also be a newer, acknowledged record that rotted on disk: the node checks its
        # history against the loaded record before it starts (`Node._check_history_agrees`).
        for slot in slots:
            if slot.problem:
                self.damaged_slot = f"[{slot.path}] ({slot.problem})"
                log.warning(
                    "ignoring damaged %s: using [%s], generation %d", self.damaged_slot, newest.path, newest.generation
                )
        assert newest.payload is not None
        loaded = _decode_state_file(newest.path, newest.payload, cluster_name)
        self._term = loaded.current_term
        self._state = loaded.last_accepted_state
        self._state_bytes = encode_state(self._state)
        self._generation = newest.generation
        self._newest = self.paths.index(newest.path)  # the slot holding the newest valid record
        if legacy.exists():
            log.info("removing [%s]: [%s] holds its content or a newer state", legacy, newest.path)
            self._remove_legacy(legacy)

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
        payload = _payload(term, state_bytes)
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


def load_or_create_node_id(data_dir: Path) -> str:
    """A random id made on first start. A wiped data directory is a new node, with a new id."""
    path = data_dir / NODE_ID_FILE
    if path.exists():
        node_id = read_checked(path).decode("utf-8", "replace").strip()
        if not node_id or not node_id.isalnum():
            raise DataDirError(f"[{path}] is corrupt: not a node id")
        return node_id
    for name in (LEGACY_STATE_FILE, *SLOT_FILES):
        state_path = data_dir / name
        try:
            size = state_path.stat().st_size
        except FileNotFoundError:
            continue
        if size > 0 or name == LEGACY_STATE_FILE:
            raise DataDirError(f"[{path}] is missing but [{state_path}] exists; refusing to invent a new identity")
    node_id = secrets.token_hex(8)
    atomic_write(path, node_id.encode())
    return node_id


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
