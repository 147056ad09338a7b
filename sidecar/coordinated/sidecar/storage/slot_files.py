"""Reading the state files of earlier versions, to migrate them: two slot files and a single legacy file.

Until the SQLite store, term and state were rewritten whole on every write into `coordination-state.0` and
`.1`, alternately, each a record of a 60-byte header (magic `COORDINATED2`, u64 write generation, u64 payload
length, sha256 of those fields and the payload; big-endian) and the JSON `{"node_id", "current_term",
"last_accepted_state"}`. Before that, one `coordination-state.dat` written by `atomic_write`. Both are read
here into the `SlotReading`s that `coordination.recovery.decide_startup` judges.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import msgspec

from coordinated.coordination.recovery import Record, SlotReading
from coordinated.coordination.state import ClusterState, initial_state
from coordinated.sidecar.storage.durable_files import DataDirError, read_checked

SLOT_MAGIC = b"COORDINATED2"
SLOT_FILES = ("coordination-state.0", "coordination-state.1")
LEGACY_STATE_FILE = "coordination-state.dat"

_SLOT_FIELDS = struct.Struct(">12sQQ")
SLOT_HEADER_SIZE = _SLOT_FIELDS.size + hashlib.sha256().digest_size


class StateFile(msgspec.Struct):
    current_term: int
    last_accepted_state: ClusterState
    node_id: str | None = None  # absent in records written by earlier versions


_STATE_DECODER = msgspec.json.Decoder(StateFile)


def encode_slot_record(generation: int, payload: bytes) -> bytes:
    """One slot record as earlier versions wrote it (for tests of the migration)."""
    fields = _SLOT_FIELDS.pack(SLOT_MAGIC, generation, len(payload))
    digest = hashlib.sha256(fields)
    digest.update(payload)
    return b"".join((fields, digest.digest(), payload))


def decode_state_file(path: Path, payload: bytes) -> StateFile:
    try:
        return _STATE_DECODER.decode(payload)
    except msgspec.MsgspecError as error:
        raise DataDirError(f"[{path}] is corrupt: {error}") from None


def summary(loaded: StateFile, generation: int, fingerprint: str, cluster_name: str) -> Record:
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


def read_slot(path: Path, cluster_name: str) -> tuple[SlotReading, StateFile | None]:
    """What one slot file holds; a record that passes its checksum but cannot be decoded is not a torn write
    but a bug or a foreign file, so it stops the node at once."""
    name = f"[{path}]"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return SlotReading(name, "missing"), None
    except OSError as error:
        raise DataDirError(f"cannot read [{path}]: {error.strerror or error}") from None
    if not data:
        return SlotReading(name, "empty"), None
    if len(data) < SLOT_HEADER_SIZE:
        return SlotReading(name, "damaged", f"truncated header, {len(data)} of {SLOT_HEADER_SIZE} bytes"), None
    magic, generation, length = _SLOT_FIELDS.unpack_from(data)
    if magic != SLOT_MAGIC:
        return SlotReading(name, "damaged", f"malformed header (expected {SLOT_MAGIC.decode()})"), None
    available = len(data) - SLOT_HEADER_SIZE
    if length > available:
        return SlotReading(name, "damaged", f"truncated, {available} of {length} payload bytes"), None
    payload = data[SLOT_HEADER_SIZE : SLOT_HEADER_SIZE + length]
    digest = hashlib.sha256(data[: _SLOT_FIELDS.size])
    digest.update(payload)
    if digest.digest() != data[_SLOT_FIELDS.size : SLOT_HEADER_SIZE]:
        return SlotReading(name, "damaged", "checksum mismatch"), None
    # Bytes after the record are ignored: only a crash between pwrite and ftruncate left any.
    loaded = decode_state_file(path, payload)
    record = summary(loaded, generation, digest.hexdigest(), cluster_name)
    return SlotReading(name, "valid", record=record), loaded


def read_legacy(path: Path, cluster_name: str) -> tuple[SlotReading, StateFile | None] | None:
    if not path.exists():
        return None
    try:
        loaded = decode_state_file(path, read_checked(path))
    except DataDirError as error:
        return SlotReading(f"[{path}]", "damaged", str(error).removeprefix(f"[{path}] is corrupt: ")), None
    return SlotReading(f"[{path}]", "valid", record=summary(loaded, 0, "legacy", cluster_name)), loaded
