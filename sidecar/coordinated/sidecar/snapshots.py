"""Snapshot files in an `fs` repository: what a snapshot holds, how it is written and read back.

A snapshot is one file, `snap-<name>.dat`, in the repository's location: a header line
`COORDINATED-SNAPSHOT1 <sha256 of the payload> <payload length>` and the JSON payload (`SnapshotFile`). It is
written to a temp file, fsynced, linked into place (so that two snapshots of one name cannot both win) and the
directory fsynced: a reader sees a whole snapshot or none. A file whose header, length or checksum does not
hold is refused with `SnapshotCorrupt`, naming the file, and so is one whose content does not hang together
(numbers out of range, versions or sessions that contradict each other). `path.repo` lists the directories
repositories may live under, as in Elasticsearch.

The checksum proves integrity, not origin: whoever can write to the repository can make a file with a valid
one. With a snapshot secret (`snapshot.secret_file`) the header also carries `hmac-sha256=<hex>`, an
HMAC-SHA256 of `SIGNATURE_DOMAIN || payload` (the payload names the snapshot, so a signed file cannot be
passed off under another name), and a node holding the secret reads only snapshots signed with it. The
master checks a restored snapshot's content as it checks the writes that could have made it, either way
(`coordination.validation.restore_problem`, and the batch's size limits).

Blocking functions: the API runs them in a worker thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import uuid
from pathlib import Path
from typing import Any

import msgspec

from coordinated.coordination.offline_recovery import UNSAFE_BOOTSTRAP_SETTING
from coordinated.coordination.settings import Parsed, Setting
from coordinated.coordination.state import ClusterState, KeyVersion, Long, Session
from coordinated.coordination.validation import session_id_problem
from coordinated.sidecar.auth import parse_secret_file


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
SNAPSHOT_SECRET_FILE: Setting[str | None] = Setting(
    "snapshot.secret_file",
    Parsed(parse_secret_file),
    None,
    "file with the snapshot secret (at least 16 bytes): snapshots are written signed (HMAC-SHA256) and only "
    "snapshots signed with it are read",
)

MAGIC = b"COORDINATED-SNAPSHOT1"
SIGNATURE_DOMAIN = b"coordinated snapshot v1\n"
SIGNATURE_PREFIX = b"hmac-sha256="
FORMAT = 1
PREFIX, SUFFIX = "snap-", ".dat"


class SnapshotFile(msgspec.Struct, frozen=True, kw_only=True):
    """The committed global state of one cluster-state version, and when it was taken."""

    format: int = FORMAT
    snapshot: str
    uuid: str
    cluster_name: str
    cluster_uuid: str
    term: Long
    version: Long  # of the cluster state the snapshot holds
    state_uuid: str
    start_time_in_millis: Long
    end_time_in_millis: Long
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


def _signature(secret: bytes, payload: bytes) -> bytes:
    return SIGNATURE_PREFIX + hmac.new(secret, SIGNATURE_DOMAIN + payload, hashlib.sha256).hexdigest().encode()


def encode_snapshot(snapshot: SnapshotFile, secret: bytes | None = None) -> bytes:
    payload = _ENCODER.encode(snapshot)
    header = b"%s %s %d" % (MAGIC, hashlib.sha256(payload).hexdigest().encode(), len(payload))
    if secret is not None:
        header += b" " + _signature(secret, payload)
    return header + b"\n" + payload


def decode_snapshot(data: bytes, path: Path, secret: bytes | None = None) -> SnapshotFile:
    """The snapshot in `data` (the file at `path`, for messages); with `secret`, only if signed with it. Raises
    SnapshotCorrupt, naming the file and what is wrong."""
    header, sep, payload = data.partition(b"\n")
    parts = header.split(b" ")
    if not sep or len(parts) not in (3, 4) or parts[0] != MAGIC:
        raise SnapshotCorrupt(f"snapshot file [{path}] is damaged: it does not start with a snapshot header")
    digest, length = parts[1], parts[2]
    if not length.isdigit() or int(length) != len(payload):
        raise SnapshotCorrupt(
            f"snapshot file [{path}] is damaged: the header says {length.decode(errors='replace')} bytes but "
            f"{len(payload)} follow (truncated?)"
        )
    if hashlib.sha256(payload).hexdigest().encode() != digest:
        raise SnapshotCorrupt(f"snapshot file [{path}] is damaged: checksum mismatch")
    if secret is not None:
        if len(parts) != 4:
            raise SnapshotCorrupt(
                f"snapshot file [{path}] is not signed, and this node reads only snapshots signed with its "
                "[snapshot.secret_file]"
            )
        if not hmac.compare_digest(parts[3], _signature(secret, payload)):
            raise SnapshotCorrupt(
                f"snapshot file [{path}] is not signed with this node's [snapshot.secret_file]: made or changed "
                "by someone without the secret"
            )
    try:
        snapshot = _DECODER.decode(payload)
    except (msgspec.DecodeError, UnicodeDecodeError) as error:
        raise SnapshotCorrupt(f"snapshot file [{path}] is damaged: {error}") from None
    except RecursionError:
        raise SnapshotCorrupt(f"snapshot file [{path}] is damaged: nested too deeply") from None
    if snapshot.format != FORMAT:
        raise SnapshotCorrupt(f"snapshot file [{path}] has format [{snapshot.format}]; this version reads [{FORMAT}]")
    problem = content_problem(snapshot)
    if problem is not None:
        raise SnapshotCorrupt(f"snapshot file [{path}] does not hang together: {problem}")
    return snapshot


def content_problem(snapshot: SnapshotFile) -> str | None:
    """What in a snapshot's content contradicts itself: versions for other keys than it holds, a key or session
    newer than the snapshot, sessions that are not well formed, ephemeral keys of unknown sessions. (Key names,
    values and settings are the master's to judge at a restore, as for any write.)"""
    if set(snapshot.kv) != set(snapshot.kv_versions):
        return "it does not give versions for exactly its keys"
    for key, versions in snapshot.kv_versions.items():
        if not 1 <= versions.create_version <= versions.version <= snapshot.version:
            return f"key [{key}] has versions {versions.version} (created {versions.create_version}) beyond the snapshot's {snapshot.version}"
    for session_id, session in snapshot.sessions.items():
        problem = session_id_problem(session_id)
        if problem is not None:
            return problem
        if session.create_version > snapshot.version:
            return f"session [{session_id}] was created at version {session.create_version}, after the snapshot"
    for key, session_id in snapshot.kv_sessions.items():
        if key not in snapshot.kv or session_id not in snapshot.sessions:
            return f"ephemeral key [{key}] names session [{session_id}], which the snapshot does not hold with it"
    marker = snapshot.persistent_settings.get(UNSAFE_BOOTSTRAP_SETTING)
    if marker not in (None, "true"):
        return f"[{UNSAFE_BOOTSTRAP_SETTING}] is [{marker}]; only the node tool sets it, to [true]"
    return None


def write_snapshot(location: Path, snapshot: SnapshotFile, secret: bytes | None = None) -> Path:
    """Write atomically and durably (signed with `secret` if given); raises SnapshotExists if the name is taken
    (checked atomically)."""
    final = snapshot_path(location, snapshot.snapshot)
    if final.exists():
        raise SnapshotExists(snapshot.snapshot)
    tmp = location / f".{final.name}.{snapshot.uuid}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        data = memoryview(encode_snapshot(snapshot, secret))
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


def read_snapshot(location: Path, name: str, secret: bytes | None = None) -> SnapshotFile:
    path = snapshot_path(location, name)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SnapshotMissing(name) from None
    except OSError as error:
        raise SnapshotCorrupt(f"cannot read snapshot file [{path}]: {error.strerror or error}") from None
    snapshot = decode_snapshot(data, path, secret)
    if snapshot.snapshot != name:
        raise SnapshotCorrupt(f"snapshot file [{path}] holds snapshot [{snapshot.snapshot}], not [{name}]")
    return snapshot


def delete_snapshot(location: Path, name: str) -> None:
    try:
        snapshot_path(location, name).unlink()
    except FileNotFoundError:
        raise SnapshotMissing(name) from None
    _fsync_dir(location)


def list_snapshots(
    location: Path, secret: bytes | None = None
) -> list[tuple[str, SnapshotFile | SnapshotCorrupt, float]]:
    """Every snapshot file: (name, the snapshot or why it is unusable, file mtime), oldest first."""
    found: list[tuple[str, SnapshotFile | SnapshotCorrupt, float]] = []
    if not location.is_dir():
        return found
    for path in location.glob(f"{PREFIX}*{SUFFIX}"):
        name = path.name[len(PREFIX) : -len(SUFFIX)]
        try:
            mtime = path.stat().st_mtime
            found.append((name, read_snapshot(location, name, secret), mtime))
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
