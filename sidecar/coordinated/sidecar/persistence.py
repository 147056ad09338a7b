"""Durable node identity, current term and last-accepted state in the data directory.

Each file is replaced atomically (write to a temp file, fsync, rename, fsync the directory) and carries a
sha256 checksum in a one-line header, so that a torn or bit-rotten file is detected at startup. A file that
cannot be read or checked stops the node: silently resetting the term or the accepted state could let a node
vote twice in a term or forget a committed state.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
from pathlib import Path

import msgspec

from coordinated.coordination.state import ClusterState, encode_state, initial_state

MAGIC = b"COORDINATED1"
STATE_FILE = "coordination-state.dat"
NODE_ID_FILE = "node-id.dat"
LOCK_FILE = "node.lock"


class DataDirError(Exception):
    """The data directory cannot be used; the message names the file and what is wrong."""


def atomic_write(path: Path, payload: bytes) -> None:
    """Write `MAGIC sha256 length\\n payload` so that readers see the old file or the new one, never a mix."""
    header = b"%s %s %d\n" % (MAGIC, hashlib.sha256(payload).hexdigest().encode(), len(payload))
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        _write_all(fd, header + payload)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_checked(path: Path) -> bytes:
    """The payload of a file written by `atomic_write`; raises DataDirError saying what is wrong."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise DataDirError(f"cannot read [{path}]: {error.strerror or error}") from None
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


class _StateFile(msgspec.Struct):
    current_term: int
    last_accepted_state: ClusterState


_STATE_DECODER = msgspec.json.Decoder(_StateFile)


class FilePersistedState:
    """The core's `PersistedState`, kept in one file so that term and state can never disagree on disk."""

    def __init__(self, data_dir: Path, cluster_name: str) -> None:
        self.path = data_dir / STATE_FILE
        self.bytes_written = 0
        self.writes = 0
        if self.path.exists():
            payload = read_checked(self.path)
            try:
                loaded = _STATE_DECODER.decode(payload)
            except msgspec.MsgspecError as error:
                raise DataDirError(f"[{self.path}] is corrupt: {error}") from None
            if loaded.last_accepted_state.cluster_name != cluster_name:
                raise DataDirError(
                    f"[{self.path}] holds a state of cluster [{loaded.last_accepted_state.cluster_name}], "
                    f"but cluster.name is [{cluster_name}]"
                )
            self._term = loaded.current_term
            self._state = loaded.last_accepted_state
            self._state_bytes = encode_state(self._state)
        else:
            self._term = 0
            self._state = initial_state(cluster_name)
            self._state_bytes = encode_state(self._state)

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
        # Builds the JSON around the cached state encoding: a term change does not re-encode the state.
        payload = b'{"current_term":%d,"last_accepted_state":%s}' % (term, state_bytes)
        atomic_write(self.path, payload)
        self.bytes_written += len(payload)
        self.writes += 1


def load_or_create_node_id(data_dir: Path) -> str:
    """A random id made on first start. A wiped data directory is a new node, with a new id."""
    path = data_dir / NODE_ID_FILE
    if path.exists():
        node_id = read_checked(path).decode("utf-8", "replace").strip()
        if not node_id or not node_id.isalnum():
            raise DataDirError(f"[{path}] is corrupt: not a node id")
        return node_id
    if (data_dir / STATE_FILE).exists():
        raise DataDirError(
            f"[{path}] is missing but [{data_dir / STATE_FILE}] exists; refusing to invent a new identity"
        )
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
