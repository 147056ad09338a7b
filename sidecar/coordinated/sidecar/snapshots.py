"""Snapshots: what one holds, its format, and the repository interface every repository type implements.

A snapshot is one blob, `snap-<name>.dat`: a header line `COORDINATED-SNAPSHOT1 <sha256 of the payload> <payload
length>` and the JSON payload (`SnapshotFile`). Every repository type (`fs` in `snapshot_fs`, `s3` in
`snapshot_s3`) stores exactly these bytes and reads them back through `SnapshotRepository`, so the format and its
checks are one: a blob whose header, length or checksum does not hold is refused with `SnapshotCorrupt`, naming
where it is; a name is written at most once (`SnapshotExists`), atomically, so that a reader sees a whole
snapshot or none.
"""

from __future__ import annotations

import hashlib
import uuid
from abc import ABC, abstractmethod
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


class RepositoryUnavailable(SnapshotError):
    """The repository's storage failed (a disk error, an object store that cannot be reached or refuses us)."""


_DECODER = msgspec.json.Decoder(SnapshotFile)
_ENCODER = msgspec.json.Encoder(order="sorted")


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


def decode_snapshot(data: bytes, path: object) -> SnapshotFile:
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


def blob_name(name: str) -> str:
    """The file or object name of snapshot `name` in any repository."""
    return f"{PREFIX}{name}{SUFFIX}"


def name_of(blob: str) -> str | None:
    """The snapshot a file or object name holds, or None if it is not a snapshot's."""
    if blob.startswith(PREFIX) and blob.endswith(SUFFIX) and len(blob) > len(PREFIX) + len(SUFFIX):
        return blob[len(PREFIX) : -len(SUFFIX)]
    return None


Listed = tuple[str, SnapshotFile | SnapshotCorrupt, float]  # name, the snapshot or why it is unusable, mtime


class SnapshotRepository(ABC):
    """Where snapshots are kept. A type stores and fetches blobs; writing, reading back, listing and their checks
    are shared. Storage failures raise RepositoryUnavailable."""

    @abstractmethod
    def where(self, name: str) -> str:
        """Where snapshot `name` is (a file path, an s3:// URI), for messages."""

    @abstractmethod
    async def verify(self) -> None:
        """Prove that this node can write, read and delete here (as Elasticsearch verifies a repository)."""

    @abstractmethod
    async def put_new(self, name: str, data: bytes) -> None:
        """Store a blob under a name not taken yet, atomically; SnapshotExists if it is taken."""

    @abstractmethod
    async def fetch(self, name: str) -> bytes:
        """SnapshotMissing if there is none."""

    @abstractmethod
    async def names(self) -> list[tuple[str, float]]:
        """Every snapshot's name and modification time (seconds)."""

    @abstractmethod
    async def remove(self, name: str) -> None:
        """SnapshotMissing if there is none."""

    async def write(self, snapshot: SnapshotFile) -> None:
        await self.put_new(snapshot.snapshot, encode_snapshot(snapshot))

    async def read(self, name: str) -> SnapshotFile:
        where = self.where(name)
        snapshot = decode_snapshot(await self.fetch(name), where)
        if snapshot.snapshot != name:
            raise SnapshotCorrupt(f"snapshot file [{where}] holds snapshot [{snapshot.snapshot}], not [{name}]")
        return snapshot

    async def list(self) -> list[Listed]:
        """Every snapshot, readable or not, oldest first."""
        found: list[Listed] = []
        for name, mtime in await self.names():
            try:
                found.append((name, await self.read(name), mtime))
            except SnapshotCorrupt as error:
                found.append((name, error, mtime))
            except SnapshotMissing:
                continue  # deleted meanwhile
        found.sort(key=lambda item: (_start_ms(item[1], item[2]), item[0]))
        return found


def _start_ms(entry: SnapshotFile | SnapshotCorrupt, mtime: float) -> int:
    return entry.start_time_in_millis if isinstance(entry, SnapshotFile) else int(mtime * 1000)
