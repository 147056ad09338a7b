"""Chunked transfer of large peer messages (a multi-megabyte full state, mostly) over one peer stream.

A message whose encoded envelope is larger than `transport.max_chunk_size` is written as a run of chunk frames,
each within the frame limit, back to back on the stream that would have carried it whole. The receiver
reassembles them and hands the envelope on only once every chunk has arrived, in order, within the size the
first chunk advertised, and the SHA-256 of the whole matches: a transfer that is interrupted, out of order,
inconsistent, over its size, or of a term older than the receiver's is discarded whole, so the core never sees
part of a state. As in Elasticsearch's peer recovery (file chunks of `indices.recovery.chunk_size`, each at
its position, the file's checksum verified after the last), the receiver holds one transfer at a time and
checks the whole at the end; unlike etcd's snapshot sender (one streamed HTTP request per snapshot, on a
separate connection), the chunks share the peer's ordered stream, so nothing else reorders around them.

The stream's MAC (see `auth`), when a cluster secret is set, covers each chunk frame as any other frame.

Frame layout (big-endian), the body of one binary frame:

    magic b"\\x00CHK" | transfer id u64 | index u32 | count u32 | total size u64 | term u64 | version u64
    | sha256 of the whole (32 bytes) | data

A JSON envelope starts with `{`, so the magic's zero byte tells a chunk from a whole message. `term` and
`version` are the publication's for a `PublishRequest` (so a stale transfer is dropped before it is buffered),
0 for any other message; after reassembly they must match what the envelope holds.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from coordinated.coordination.messages import Message, PublishRequest

MAGIC = b"\x00CHK"
_HEADER = struct.Struct(">4sQIIQQQ32s")
HEADER_BYTES = _HEADER.size


def is_chunk(body: bytes | memoryview) -> bool:
    return body[:4] == MAGIC


def transfer_term_version(message: Message) -> tuple[int, int]:
    """What a chunk header says about its message: the publication's term and version, else (0, 0)."""
    if isinstance(message, PublishRequest):
        return message.term, message.version
    return 0, 0


def chunk_frames(body: bytes, transfer_id: int, chunk_size: int, term: int, version: int) -> Iterator[bytes]:
    """The frames carrying `body` in chunks of at most `chunk_size` bytes of data each."""
    count = -(-len(body) // chunk_size)
    digest = hashlib.sha256(body).digest()
    view = memoryview(body)
    for index in range(count):
        header = _HEADER.pack(MAGIC, transfer_id, index, count, len(body), term, version, digest)
        yield header + view[index * chunk_size : (index + 1) * chunk_size]


@dataclass(frozen=True)
class Complete:
    """A reassembled, verified message body, with the term and version its chunks claimed."""

    body: bytearray  # not copied into bytes: the decoder reads any buffer
    term: int
    version: int


@dataclass(frozen=True)
class Discarded:
    """A transfer dropped whole; `reason` says why, for the log."""

    transfer_id: int
    reason: str


@dataclass
class _Transfer:
    transfer_id: int
    count: int
    total: int
    term: int
    version: int
    digest: bytes
    buffer: bytearray
    hasher: hashlib._Hash
    next_index: int = 0

    def describe(self) -> str:
        return f"transfer {self.transfer_id} (term {self.term}, version {self.version}, {self.total} bytes)"


class Reassembler:
    """The receiving end of one stream: at most one transfer at a time, its bytes held until it is whole.

    `max_total` bounds what a transfer may advertise; the buffer grows only with chunks that arrived in order
    and fit within what was advertised, so a forged size never makes it allocate. `current_term` is the node's
    term: a transfer of an older term is dropped (the core would refuse it anyway) rather than buffered.
    """

    def __init__(self, max_total: int, current_term: Callable[[], int]) -> None:
        self.max_total = max_total
        self.current_term = current_term
        self._transfer: _Transfer | None = None
        self._dropped_id: int | None = None  # the later chunks of a discarded transfer are skipped quietly
        self._interrupted: Discarded | None = None

    @property
    def pending_bytes(self) -> int:
        return len(self._transfer.buffer) if self._transfer is not None else 0

    def accept(self, frame: bytes | memoryview) -> Complete | Discarded | None:
        """One chunk frame (`is_chunk`): the whole message when this chunk completes it, a `Discarded` when the
        transfer is dropped, or None while incomplete. An unfinished transfer that this chunk's new one cuts short
        is reported by `take_interrupted`."""
        if len(frame) < HEADER_BYTES:
            return self._discard(self._current_id(), f"a chunk frame of {len(frame)} bytes is shorter than its header")
        _magic, transfer_id, index, count, total, term, version, digest = _HEADER.unpack_from(frame)
        data = memoryview(frame)[HEADER_BYTES:]
        transfer = self._transfer
        if transfer is not None and transfer.transfer_id != transfer_id:
            self._interrupted = self._discard(
                transfer.transfer_id, f"{transfer.describe()} was interrupted by transfer {transfer_id}"
            )
            transfer = None
        if transfer is None:
            if transfer_id == self._dropped_id:
                return None
            if index != 0:
                return self._discard(transfer_id, f"chunk {index} of transfer {transfer_id} came without chunk 0")
            if count < 1 or total < 1 or total > self.max_total:
                return self._discard(
                    transfer_id,
                    f"transfer {transfer_id} advertises {total} bytes in {count} chunks; the limit is "
                    f"{self.max_total} bytes",
                )
            transfer = self._transfer = _Transfer(
                transfer_id, count, total, term, version, digest, bytearray(), hashlib.sha256()
            )
        elif (count, total, term, version, digest) != (
            transfer.count,
            transfer.total,
            transfer.term,
            transfer.version,
            transfer.digest,
        ):
            return self._discard(transfer_id, f"chunk {index} of {transfer.describe()} changes its header")
        elif index != transfer.next_index:
            return self._discard(
                transfer_id, f"chunk {index} of {transfer.describe()} is out of order: expected {transfer.next_index}"
            )
        current = self.current_term()
        if term != 0 and term < current:  # 0: not a publication (a large forwarded write, say): no term to check
            return self._discard(transfer_id, f"{transfer.describe()} is of a term older than ours ({current})")
        if len(transfer.buffer) + len(data) > total:
            return self._discard(transfer_id, f"chunk {index} of {transfer.describe()} goes past the advertised size")
        transfer.buffer += data
        transfer.hasher.update(data)
        transfer.next_index += 1
        if transfer.next_index < count:
            return None
        self._transfer = None
        if len(transfer.buffer) != total:
            return self._discard(
                transfer_id, f"{transfer.describe()} ended after {len(transfer.buffer)} bytes, short of its size"
            )
        if transfer.hasher.digest() != digest:
            return self._discard(transfer_id, f"{transfer.describe()} failed its checksum")
        return Complete(transfer.buffer, term, version)

    def take_interrupted(self) -> Discarded | None:
        """The unfinished transfer that the last `accept` dropped because a new one began, if any."""
        interrupted, self._interrupted = self._interrupted, None
        return interrupted

    def close(self) -> Discarded | None:
        """The stream ended: an unfinished transfer is dropped."""
        transfer, self._transfer = self._transfer, None
        if transfer is None:
            return None
        return Discarded(
            transfer.transfer_id,
            f"{transfer.describe()} was interrupted after {transfer.next_index} of {transfer.count} chunks",
        )

    def _current_id(self) -> int:
        return self._transfer.transfer_id if self._transfer is not None else -1

    def _discard(self, transfer_id: int, reason: str) -> Discarded:
        if self._transfer is not None and self._transfer.transfer_id == transfer_id:
            self._transfer = None
        self._dropped_id = transfer_id
        return Discarded(transfer_id, reason)


def header_mismatch(message: Message, term: int, version: int) -> str | None:
    """Why a reassembled message does not match what its chunks claimed, or None."""
    expected = transfer_term_version(message)
    if expected != (term, version):
        return (
            f"its chunks claimed term {term} and version {version}, but it holds a "
            f"{type(message).__name__} of term {expected[0]} and version {expected[1]}"
        )
    return None
