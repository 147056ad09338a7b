"""The history's files: `segment-N.jsonl` (the open segment, and closed ones not compressed yet) and
`segment-N.jsonl.zst` (closed and compressed), where N is the segment's first seq, zero-padded to 12 digits.

A closed segment is compressed into `segment-N.jsonl.zst.tmp`, fsynced, renamed to `segment-N.jsonl.zst`
and only then is the plain file removed, so a crash leaves the plain file, or both (the compressed one is
then complete, and the plain one is removed at the next pass), never neither. Reading goes through
`SegmentExpander`, so both formats read as format-1 events, and a compressed segment is read through the
frame check of `coordinated.coordination.history_frames`: one that is cut short or damaged raises
`DamagedSegment` (an OSError naming what is wrong) instead of reading as fewer events.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

import zstandard

from coordinated.coordination.history_format import ExpandedLine, SegmentExpander, format_problem
from coordinated.coordination.history_frames import DamagedSegment, open_checked
from coordinated.coordination.history_lines import ends_with_cut_line, is_complete
from coordinated.sidecar.storage.durable_files import fsync_dir

PLAIN_SUFFIX = ".jsonl"
COMPRESSED_SUFFIX = ".jsonl.zst"
TMP_SUFFIX = ".tmp"
SEGMENT_PATTERN = re.compile(r"^segment-(\d{12})\.jsonl(\.zst)?$")
# zstd's default level: about 5 times smaller than JSON lines at a few ms per MB; the frame has a checksum.
COMPRESSION_LEVEL = 3
_TAIL_BYTES = 64 * 1024


class Segment(NamedTuple):
    first_seq: int
    path: Path

    @property
    def compressed(self) -> bool:
        return self.path.name.endswith(COMPRESSED_SUFFIX)


def segment_name(first_seq: int, compressed: bool = False) -> str:
    return f"segment-{first_seq:012d}{COMPRESSED_SUFFIX if compressed else PLAIN_SUFFIX}"


def list_segments(directory: Path) -> list[Segment]:
    """The segments in seq order. Where a closed segment exists both plain and compressed (a crash between the
    rename and the removal), the compressed one is the segment: it is complete."""
    found: dict[int, Path] = {}
    for entry in directory.iterdir() if directory.exists() else ():
        match = SEGMENT_PATTERN.match(entry.name)
        if match is None:
            continue
        first_seq = int(match.group(1))
        if match.group(2) or first_seq not in found:
            found[first_seq] = entry
    return [Segment(first_seq, found[first_seq]) for first_seq in sorted(found)]


def compressed_segments(directory: Path) -> list[Path]:
    """The closed segments in their final form (compressed, durable), oldest first: what an archive uploads.
    The open segment is never compressed, so none of these is still being written."""
    return [segment.path for segment in list_segments(directory) if segment.compressed]


def leftover_files(directory: Path) -> list[Path]:
    """Files a crash in the middle of a compression leaves: a `.tmp`, or a plain file beside its `.zst`."""
    names = {entry.name for entry in directory.iterdir()} if directory.exists() else set()
    leftovers = [directory / name for name in names if name.endswith(COMPRESSED_SUFFIX + TMP_SUFFIX)]
    leftovers += [
        directory / name
        for name in names
        if SEGMENT_PATTERN.match(name) and name.endswith(PLAIN_SUFFIX) and name + ".zst" in names
    ]
    return sorted(leftovers)


def open_segment(path: Path) -> BinaryIO:
    """The segment's bytes, decompressed (and checked to its end, see `history_frames`) if it is compressed."""
    file = path.open("rb")
    if not path.name.endswith(COMPRESSED_SUFFIX):
        return file
    return open_checked(file)


def read_lines(path: Path) -> Iterator[bytes]:
    """Every line of a segment as read (a last line cut by a crash lacks its newline)."""
    with open_segment(path) as file:
        yield from file


def expanded_lines(path: Path) -> Iterator[ExpandedLine]:
    """The segment's complete lines as format-1 events; the crash-cut last line, if any, is skipped."""
    expander = SegmentExpander()
    for line in read_lines(path):
        if is_complete(line) and line.strip():
            yield expander.expand(line)


def plain_tail(path: Path) -> tuple[bytes, bool]:
    """(the last complete lines of a plain segment, as far back as 64 KiB; whether it ends in a cut line)."""
    size = path.stat().st_size
    with path.open("rb") as file:
        file.seek(max(0, size - _TAIL_BYTES))
        tail = file.read()
    partial = ends_with_cut_line(tail)
    if partial:
        tail = tail[: tail.rfind(b"\n") + 1]
    return tail, partial


def compress(path: Path) -> Path:
    """Compress a closed plain segment durably and remove the plain file; returns the `.zst` path."""
    target = path.with_name(path.name + ".zst")
    tmp = target.with_name(target.name + TMP_SUFFIX)
    compressor = zstandard.ZstdCompressor(level=COMPRESSION_LEVEL, write_checksum=True)
    with path.open("rb") as source, tmp.open("wb") as sink:
        compressor.copy_stream(source, sink, size=os.fstat(source.fileno()).st_size)
        sink.flush()
        os.fsync(sink.fileno())
    os.replace(tmp, target)
    fsync_dir(path.parent)
    path.unlink()
    fsync_dir(path.parent)
    return target


def verify_compressed(path: Path) -> str:
    """'' when a compressed segment decompresses whole (every frame ends, its checksum holds) and is of a
    history format this release reads, else what is wrong."""
    try:
        with open_segment(path) as file:
            problem = format_problem(file.readline())
            while file.read(1 << 20):
                pass
    except DamagedSegment as error:
        return f"[{path}] is {error}"
    except OSError as error:
        return f"[{path}] cannot be read: {error.strerror or error}"
    return f"[{path}] {problem}" if problem else ""
