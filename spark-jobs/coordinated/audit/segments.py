"""History segments that Spark's text reader cannot read as they are: compressed with zstd (`.jsonl.zst`), or
written in format 2 (`coordinated.coordination.history_format`), whose lines leave out fields the lines before
them set and may stand for two events.

These are read in Python tasks, in batches of consecutive segments (`batches`), and expanded into format-1
event lines, which then go through exactly the same parsing and checks as any other line. Plain format-1 files (and `.gz`, `.bz2`) stay
on Spark's own reader, which is faster. The rows carry the file's line index (`_mid`, in one block), so a bad
line is named by its line in the segment as for other files.

A compressed segment is read through the frame check of `coordinated.coordination.history_frames`, and each
segment's first line through the format check of `history_format`: a segment that is cut short, damaged, or of
a format this release does not read fails its task with `UnreadableSegment`, which names the file (exit 2),
instead of reading as fewer events, which the audit would call a gap.

A source is a file URI or path. `OPENERS` maps a URI scheme to a function that opens it for reading, in the
task; local files are built in. Files on another Hadoop file system (an archive's `s3a://` objects) are read
by Spark (`binaryFile`, with Spark's own credentials) and expanded from their bytes (`rows_of_contents`).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import BinaryIO
from urllib.parse import unquote, urlparse

import msgspec

from coordinated.coordination.history_format import (
    FORMAT_START,
    SegmentExpander,
    SegmentFormatError,
    newer_segment_problem,
)
from coordinated.coordination.history_frames import open_checked
from coordinated.coordination.history_lines import is_complete
from coordinated.release import installed_release

COMPRESSED = ".zst"
_HEAD_BYTES = len(FORMAT_START)
_LINE = msgspec.json.Encoder(order="sorted")


def local_file(uri: str) -> str | None:
    if uri.startswith("file:"):
        return unquote(urlparse(uri).path)
    return None if "://" in uri else uri


def _open_local(uri: str) -> BinaryIO:
    path = local_file(uri)
    if path is None:
        raise OSError(f"no reader for {uri}")
    return open(path, "rb")


OPENERS: dict[str, Callable[[str], BinaryIO]] = {"file": _open_local, "": _open_local}


def open_raw(uri: str) -> BinaryIO:
    scheme = urlparse(uri).scheme if "://" in uri or uri.startswith("file:") else ""
    opener = OPENERS.get(scheme)
    if opener is None:
        raise OSError(f"cannot read {uri}: no reader for {scheme}:// sources")
    return opener(uri)


def open_source(uri: str) -> BinaryIO:
    """The segment's bytes, decompressed when it is compressed. A plain segment that a live node compressed
    after it was listed is read from its compressed file, which holds the same lines."""
    try:
        raw = open_raw(uri)
    except FileNotFoundError:
        if uri.endswith(COMPRESSED):
            raise
        uri += COMPRESSED
        raw = open_raw(uri)
    if not uri.endswith(COMPRESSED):
        return raw
    return open_checked(raw)


def needs_expansion(uri: str) -> bool:
    """Whether the Python reader must read this file: compressed with zstd, or of format 2 or any other declared
    format (its first line says so). Only local files are looked into; a remote plain file is format 1 unless its
    name says `.zst`."""
    if uri.endswith(COMPRESSED):
        return True
    path = local_file(uri)
    if path is None:
        return False
    try:
        with open(path, "rb") as file:
            return file.read(_HEAD_BYTES) == FORMAT_START
    except OSError:
        return False


def newer_format_problem(uris: Sequence[str]) -> str | None:
    """Why the audit cannot read these segments: the first local one (of the plain or compressed files) whose first
    line says it is of a history format newer than this release reads and names the release that wrote it (the
    message names the file, the format and that release; a newer number without a release is damage, named
    where the segment is read). A remote segment is looked at where it is read (`expanded_rows`)."""
    for uri in uris:
        if local_file(uri) is None:
            continue
        try:
            with open_source(uri) as file:
                first = file.readline()
        except (OSError, EOFError, ValueError):
            continue  # damage: named where the segment is read
        problem = newer_segment_problem(first, uri, installed_release())
        if problem is not None:
            return problem
    return None


Row = tuple[str, str, int, int]  # value, _source, _block, _mid


class UnreadableSegment(OSError):
    """Worded as Spark words a file it cannot read, so the CLI names the file (exit 2)."""


# Kept out of the `raise` line: a worker's traceback quotes that line, and the CLI looks for these words.
READ_FAILED = "error while reading file"


def expanded_rows(uri: str, content: bytes | None = None) -> Iterator[Row]:
    """Every complete line of one segment as format-1 event lines, with its line index; a line that is not a
    JSON object stays as it is (the parser names it). A last line without its newline is a crash-cut line:
    skipped here, noted by the driver. `content` is the file's bytes when Spark has read them already (an
    object store's file, read by Spark's `binaryFile` so that its credentials stay Spark's)."""
    expander = SegmentExpander()
    index = -1
    try:
        with open_source(uri) if content is None else _decompressed(uri, content) as file:
            for line in file:
                index += 1
                if not is_complete(line):
                    break
                expanded = expander.expand(line)
                if expanded.events is None or expander.format == 1:
                    yield expanded.raw.decode("utf-8", errors="replace"), uri, 0, index
                    continue
                for event in expanded.events:
                    yield _LINE.encode(event).decode(), uri, 0, index
    except (OSError, EOFError, SegmentFormatError) as error:
        raise UnreadableSegment(f"{READ_FAILED} {uri}: {error}") from None


def _decompressed(uri: str, content: bytes) -> BinaryIO:
    raw = io.BytesIO(content)
    if not uri.endswith(COMPRESSED):
        return raw
    return open_checked(raw)


def rows_of(uris: Iterable[str]) -> Iterator[Row]:
    for uri in uris:
        yield from expanded_rows(uri)


def rows_of_batches(batches: Iterable[Sequence[str]]) -> Iterator[Row]:
    """`rows_of` for a task given whole batches of segments (`batches`)."""
    for batch in batches:
        yield from rows_of(batch)


# About how much a closed segment's lines shrink under zstd (format 2: 175 bytes an event, 19 compressed).
ZSTD_RATIO = 9
# What one task expands, in bytes of lines: about 180,000 events of format 2.
EXPANDED_BYTES_PER_TASK = 32 << 20


def expanded_size(uri: str) -> int:
    """About how many bytes of lines a local segment holds (0 when it cannot be seen: the reader names it)."""
    path = local_file(uri)
    try:
        size = os.path.getsize(path) if path is not None else 0
    except OSError:
        return 0
    return size * ZSTD_RATIO if uri.endswith(COMPRESSED) else size


def batches(uris: Sequence[str], at_least: int, size: Callable[[str], int] = expanded_size) -> list[list[str]]:
    """The segments in consecutive batches of about `EXPANDED_BYTES_PER_TASK` each, one task per batch, and at
    least `at_least` batches where there are as many segments (every core gets work).

    One task per segment made a task per few hundred events where nodes rotate small segments (a restart
    rotates, and so does a small `history.segment_size`): every later pass over the cached events then ran as
    many tasks, and their fixed cost was most of an audit's time."""
    if not uris:
        return []
    sizes = [max(1, size(uri)) for uri in uris]
    wanted = max(min(at_least, len(uris)), -(-sum(sizes) // EXPANDED_BYTES_PER_TASK))
    share = sum(sizes) / wanted
    out: list[list[str]] = [[]]
    filled = 0.0
    for uri, n in zip(uris, sizes, strict=True):
        if out[-1] and filled + n / 2 > share * len(out) and len(out) < wanted:
            out.append([])
        out[-1].append(uri)
        filled += n
    return out


def rows_of_contents(files: Iterable[tuple[str, bytes]]) -> Iterator[Row]:
    """`rows_of` for (URI, bytes) pairs read by Spark (`binaryFile`)."""
    for uri, content in files:
        yield from expanded_rows(uri, bytes(content))


def is_remote(uri: str) -> bool:
    """Whether a file is on a Hadoop file system other than the local one (`s3a://`): Spark reads its bytes."""
    return "://" in uri and not uri.startswith("file:")


def as_spark_names(uri: str) -> str:
    """A file URI as Spark's `_metadata.file_path` spells it (`file:/x`, where the file listing says
    `file:///x`), so that rows of both readers name a file, and its folder, alike."""
    path = local_file(uri)
    return "file:" + path if path is not None and uri.startswith("file:") else uri


def split(files: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the files Spark's text reader reads, the files the Python reader expands, named as Spark names them)."""
    expanded = [uri for uri in files if needs_expansion(uri)]
    chosen = set(expanded)
    return [uri for uri in files if uri not in chosen], [as_spark_names(uri) for uri in expanded]
