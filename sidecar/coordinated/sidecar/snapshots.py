"""Snapshot files in an `fs` repository: what a snapshot holds, how it is written and read back.

A snapshot is one file, `snap-<name>.dat`, in the repository's location: a header line
`COORDINATED-SNAPSHOT1 <sha256 of the payload> <payload length>` and the JSON payload (`SnapshotFile`). It is
written to a temp file, fsynced, linked into place (so that two snapshots of one name cannot both win) and the
directory fsynced: a reader sees a whole snapshot or none. A file whose header, length or checksum does not
hold is refused with `SnapshotCorrupt`, naming the file. `path.repo` lists the directories repositories may
live under, as in Elasticsearch.

Blocking functions: the API runs them in a worker thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
from pathlib import Path
from typing import Any

import msgspec

from coordinated.coordination.settings import Parsed, Setting
from coordinated.coordination.state import ClusterState, KeyVersion, Session


def parse_repo_paths(value: str) -> tuple[str, ...]:
    """`path.repo`: a comma list of absolute directories that snapshot repositories may live under."""
    paths = tuple(part.strip() for part in value.split(",") if part.strip())
    for path in paths:
        if not path.startswith("/"):
            raise ValueError(f"[{path}] is not an absolute path")
    return paths


PATH_REPO: Setting[tuple[str, ...] | None] = Setting(
    "path.repo",
    Parsed(parse_repo_paths),
    None,
    "comma list of absolute directories that `fs` snapshot repositories may live under (none: snapshots are off)",
)

MAGIC = b"COORDINATED-SNAPSHOT1"
FORMAT = 1
PREFIX, SUFFIX = "snap-", ".dat"


class SnapshotFile(msgspec.Struct, frozen=True, kw_only=True):
    """The committed global state of one cluster-state version, and when it was taken."""

    format: int = FORMAT
    snapshot: str
    uuid: str
    cluster_name: str
    cluster_uuid: str
    term: int
    version: int  # of the cluster state the snapshot holds
    state_uuid: str
    start_time_in_millis: int
    end_time_in_millis: int
    kv: dict[str, Any]
    kv_versions: dict[str, KeyVersion]  # for exactly the keys of `kv`
    persistent_settings: dict[str, str]
    # For the record (what the cluster held); a restore makes every key persistent and restores no session.
    sessions: dict[str, Session] = {}
    kv_sessions: dict[str, str] = {}  # an ephemeral key -> its session


class SnapshotError(Exception):
    pass


class SnapshotCorrupt(SnapshotError):
    """The file exists but does not hold a whole, intact snapshot; the message names it."""


class SnapshotMissing(SnapshotError):
    pass


class SnapshotExists(SnapshotError):
    pass


_DECODER = msgspec.json.Decoder(SnapshotFile)
_ENCODER = msgspec.json.Encoder(order="sorted")


def snapshot_path(location: Path, name: str) -> Path:
    return location / f"{PREFIX}{name}{SUFFIX}"


def location_problem(location: str, roots: tuple[str, ...]) -> tuple[Path, str | None]:
    """The resolved location and, if it is not under one of `path.repo`'s roots, why (as Elasticsearch
    says it). A relative location is resolved against the first root."""
    if not roots:
        return Path(location), (
            f"location [{location}] doesn't match any of the locations specified by path.repo because this "
            "setting is empty"
        )
    resolved = Path(os.path.realpath(os.path.join(roots[0], location)))
    for root in roots:
        real_root = Path(os.path.realpath(root))
        if resolved == real_root or real_root in resolved.parents:
            return resolved, None
    return resolved, f"location [{location}] doesn't match any of the locations specified by path.repo {list(roots)}"


def verify_location(location: Path) -> None:
    """Create the repository directory if needed and prove that this node can write to it (as Elasticsearch
    verifies a repository on registration). Raises OSError."""
    location.mkdir(parents=True, exist_ok=True)
    probe = location / f".verify-{uuid.uuid4().hex}"
    probe.write_bytes(b"ok")
    probe.unlink()


def snapshot_of(state: ClusterState, name: str, start_ms: int, end_ms: int) -> SnapshotFile:
    """What a snapshot of this (committed, immutable) state holds: a consistent cut by construction."""
    versions = {key: state.key_version(key) for key in state.kv}
    return SnapshotFile(
        snapshot=name,
        uuid=uuid.uuid4().hex,
        cluster_name=state.cluster_name,
        cluster_uuid=state.cluster_uuid,
        term=state.term,
        version=state.version,
        state_uuid=state.state_uuid,
        start_time_in_millis=start_ms,
        end_time_in_millis=end_ms,
        kv=dict(state.kv),
        kv_versions={key: v for key, v in versions.items() if v is not None},
        persistent_settings=dict(state.persistent_settings),
        sessions=dict(state.sessions),
        kv_sessions=dict(state.kv_sessions),
    )


def encode_snapshot(snapshot: SnapshotFile) -> bytes:
    payload = _ENCODER.encode(snapshot)
    return b"%s %s %d\n" % (MAGIC, hashlib.sha256(payload).hexdigest().encode(), len(payload)) + payload


def decode_snapshot(data: bytes, path: Path) -> SnapshotFile:
    header, sep, payload = data.partition(b"\n")
    parts = header.split(b" ")
    if not sep or len(parts) != 3 or parts[0] != MAGIC:
        raise SnapshotCorrupt(f"snapshot file [{path}] is damaged: it does not start with a snapshot header")
    digest, length = parts[1], parts[2]
    if not length.isdigit() or int(length) != len(payload):
        raise SnapshotCorrupt(
            f"snapshot file [{path}] is damaged: the header says {length.decode(errors='replace')} bytes but "
            f"{len(payload)} follow (truncated?)"
        )
    if hashlib.sha256(payload).hexdigest().encode() != digest:
        raise SnapshotCorrupt(f"snapshot file [{path}] is damaged: checksum mismatch")
    try:
        snapshot = _DECODER.decode(payload)
    except (msgspec.DecodeError, UnicodeDecodeError) as error:
        raise SnapshotCorrupt(f"snapshot file [{path}] is damaged: {error}") from None
    if snapshot.format != FORMAT:
        raise SnapshotCorrupt(f"snapshot file [{path}] has format [{snapshot.format}]; this version reads [{FORMAT}]")
    return snapshot


def write_snapshot(location: Path, snapshot: SnapshotFile) -> Path:
    """Write atomically and durably; raises SnapshotExists if the name is taken (checked atomically)."""
    final = snapshot_path(location, snapshot.snapshot)
    if final.exists():
        raise SnapshotExists(snapshot.snapshot)
    tmp = location / f".{final.name}.{snapshot.uuid}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        data = memoryview(encode_snapshot(snapshot))
        while data:
            data = data[os.write(fd, data) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, final)  # fails if another writer took the name meanwhile, unlike a rename
    except FileExistsError:
        raise SnapshotExists(snapshot.snapshot) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    _fsync_dir(location)
    return final


def read_snapshot(location: Path, name: str) -> SnapshotFile:
    path = snapshot_path(location, name)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SnapshotMissing(name) from None
    except OSError as error:
        raise SnapshotCorrupt(f"cannot read snapshot file [{path}]: {error.strerror or error}") from None
    snapshot = decode_snapshot(data, path)
    if snapshot.snapshot != name:
        raise SnapshotCorrupt(f"snapshot file [{path}] holds snapshot [{snapshot.snapshot}], not [{name}]")
    return snapshot


def delete_snapshot(location: Path, name: str) -> None:
    try:
        snapshot_path(location, name).unlink()
    except FileNotFoundError:
        raise SnapshotMissing(name) from None
    _fsync_dir(location)


def list_snapshots(location: Path) -> list[tuple[str, SnapshotFile | SnapshotCorrupt, float]]:
    """Every snapshot file: (name, the snapshot or why it is unusable, file mtime), oldest first."""
    found: list[tuple[str, SnapshotFile | SnapshotCorrupt, float]] = []
    if not location.is_dir():
        return found
    for path in location.glob(f"{PREFIX}*{SUFFIX}"):
        name = path.name[len(PREFIX) : -len(SUFFIX)]
        try:
            mtime = path.stat().st_mtime
            found.append((name, read_snapshot(location, name), mtime))
        except SnapshotCorrupt as error:
            found.append((name, error, mtime))
        except (SnapshotMissing, OSError):
            continue  # deleted meanwhile
    found.sort(key=lambda item: (_start_ms(item[1], item[2]), item[0]))
    return found


def _start_ms(entry: SnapshotFile | SnapshotCorrupt, mtime: float) -> int:
    return entry.start_time_in_millis if isinstance(entry, SnapshotFile) else int(mtime * 1000)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
