"""Snapshots: what one holds, its format, and the repository interface every repository type implements.

A snapshot is one blob, `snap-<name>.dat`: a header line `COORDINATED-SNAPSHOT1 <sha256 of the payload> <payload
length>` and the JSON payload (`SnapshotFile`), whose `format` says how to read it and `release` which release wrote
it (from 0.2.0 on; release 0.1.0 reads format 1 and skips `release`). A snapshot of a newer format is refused
(`SnapshotNewer`), naming its format and the release that wrote it. Every repository type (`fs` in `snapshot_fs`, `s3` in
`snapshot_s3`) stores exactly these bytes and reads them back through `SnapshotRepository`, so the format and its
checks are one: a blob whose header, length or checksum does not hold is refused with `SnapshotCorrupt`, naming
where it is; a name is written at most once (`SnapshotExists`), atomically, so that a reader sees a whole
snapshot or none. A blob whose content does not hang together (numbers out of range, versions or sessions that
contradict each other) is refused too.

The checksum proves integrity, not origin: whoever can write to the repository can make a blob with a valid
one. With a snapshot secret (`snapshot.secret_file`) the header also carries `hmac-sha256=<hex>`, an
HMAC-SHA256 of `SIGNATURE_DOMAIN || payload` (the payload names the snapshot, so a signed blob cannot be
passed off under another name), and a node holding the secret reads only snapshots signed with it, whatever
the repository's type. The master checks a restored snapshot's content as it checks the writes that could have
made it, either way (`coordination.requests.snapshots.restore_problem`, and the batch's size limits).
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from abc import ABC, abstractmethod
from typing import Any

import msgspec

from coordinated.coordination.formats import newer_format_problem
from coordinated.coordination.offline_recovery import UNSAFE_BOOTSTRAP_SETTING
from coordinated.coordination.state import ClusterState, KeyVersion, Long, Session
from coordinated.coordination.validation import session_id_problem
from coordinated.release import installed_release

MAGIC = b"COORDINATED-SNAPSHOT1"
SIGNATURE_DOMAIN = b"coordinated snapshot v1\n"
SIGNATURE_PREFIX = b"hmac-sha256="
FORMAT = 1
PREFIX, SUFFIX = "snap-", ".dat"


class SnapshotFile(msgspec.Struct, frozen=True, kw_only=True):
    """The committed global state of one cluster-state version, and when it was taken."""

    format: int = FORMAT
    release: str = ""  # the release that wrote it (none before 0.2.0)
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


class SnapshotNewer(SnapshotCorrupt):
    """The file holds a snapshot of a format newer than this release reads; the message names the format and
    the release that wrote it."""


class SnapshotMissing(SnapshotError):
    pass


class SnapshotExists(SnapshotError):
    pass


class RepositoryUnavailable(SnapshotError):
    """The repository's storage failed (a disk error, an object store that cannot be reached or refuses us)."""


_DECODER = msgspec.json.Decoder(SnapshotFile)


class _FormatOnly(msgspec.Struct):
    format: Any = FORMAT
    release: Any = None


_FORMAT_DECODER = msgspec.json.Decoder(_FormatOnly)
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
        release=installed_release(),
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


def decode_snapshot(data: bytes, path: object, secret: bytes | None = None) -> SnapshotFile:
    """The snapshot in `data` (the blob at `path`, for messages); with `secret`, only if signed with it. Raises
    SnapshotCorrupt, naming the blob and what is wrong."""
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
    try:  # its format first: a newer one may hold what this release cannot decode
        found = _FORMAT_DECODER.decode(payload)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        found = None
    if found is not None:
        writer = found.release if isinstance(found.release, str) else None
        newer = newer_format_problem(f"snapshot file [{path}]", found.format, FORMAT, installed_release(), writer)
        if newer is not None:
            raise SnapshotNewer(newer)
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


def blob_name(name: str) -> str:
    """The file or object name of snapshot `name` in any repository."""
    return f"{PREFIX}{name}{SUFFIX}"


def name_of(blob: str) -> str | None:
    """The snapshot a file or object name holds, or None if it is not a snapshot's."""
    if blob.startswith(PREFIX) and blob.endswith(SUFFIX) and len(blob) > len(PREFIX) + len(SUFFIX):
        return blob[len(PREFIX) : -len(SUFFIX)]
    return None


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

    async def write(self, snapshot: SnapshotFile, secret: bytes | None = None) -> None:
        """Signed with `secret` if given (`snapshot.secret_file`)."""
        await self.put_new(snapshot.snapshot, encode_snapshot(snapshot, secret))

    async def read(self, name: str, secret: bytes | None = None) -> SnapshotFile:
        """With `secret`, only a snapshot signed with it."""
        where = self.where(name)
        snapshot = decode_snapshot(await self.fetch(name), where, secret)
        if snapshot.snapshot != name:
            raise SnapshotCorrupt(f"snapshot file [{where}] holds snapshot [{snapshot.snapshot}], not [{name}]")
        return snapshot

    async def list(self, secret: bytes | None = None) -> list[Listed]:
        """Every snapshot, readable or not, oldest first."""
        found: list[Listed] = []
        for name, mtime in await self.names():
            try:
                found.append((name, await self.read(name, secret), mtime))
            except SnapshotCorrupt as error:
                found.append((name, error, mtime))
            except SnapshotMissing:
                continue  # deleted meanwhile
        found.sort(key=lambda item: (_start_ms(item[1], item[2]), item[0]))
        return found


def _start_ms(entry: SnapshotFile | SnapshotCorrupt, mtime: float) -> int:
    return entry.start_time_in_millis if isinstance(entry, SnapshotFile) else int(mtime * 1000)
