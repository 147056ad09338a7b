"""What a whole compressed history segment is: the one definition the node (its startup, `GET /_history`, its
background check), its archive and the audit use.

A closed segment is compressed into one zstd frame (`segment-N.jsonl.zst`) that records its content size and a
checksum of its content. zstd's decoder reports neither a file cut short nor a missing end: fed half a frame, it
gives back what it could decode (often nothing) and waits for more. So a reader must check, at the end of the
input, that every frame it began has ended, and that the input held at least one frame; and the decoder checks
the content's checksum at each frame's end where the frame carries one. A frame of another writer may lack the
checksum (the `zstd` command and older tools make such frames): it is read, with its end and its declared
content size still checked. Several frames one after the other (`cat a.zst b.zst`) read as their contents one
after the other.

A segment that fails any of these is damaged (`DamagedSegment`, an `OSError` like any other file that cannot be
read): never read as a shorter history. `FrameDecoder` is the sans-IO check (bytes in, bytes out);
`CheckedReader` wraps a binary file in it.
"""

from __future__ import annotations

import io
from typing import BinaryIO

import zstandard

_CHUNK = 1 << 20
_HEADER_MAX = 18  # bytes: the longest frame header zstd writes


class DamagedSegment(OSError):
    """A compressed segment that cannot be read whole; `problem` says what is wrong with it."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem

    def __str__(self) -> str:
        return self.problem


def _decoder() -> zstandard.ZstdDecompressionObj:
    return zstandard.ZstdDecompressor().decompressobj()


class FrameDecoder:
    """Decompresses a segment's bytes as they come (`feed`), and says at the end (`finish`) whether they were
    whole. Raises DamagedSegment as soon as the damage shows."""

    def __init__(self) -> None:
        self._decoder: zstandard.ZstdDecompressionObj | None = None
        self._declared: int | None = None  # the current frame's content size, if its header says it
        self._produced = 0  # bytes of content the current frame gave so far
        self._head = b""  # the first bytes of a frame whose header is not complete yet
        self._frames = 0  # frames that ended
        self._consumed = 0  # compressed bytes fed

    def feed(self, data: bytes) -> bytes:
        out: list[bytes] = []
        while data:
            if self._decoder is None:
                data = self._start_frame(data)
                if self._decoder is None:
                    break  # the frame header is not complete yet
            decoder = self._decoder
            try:
                content = decoder.decompress(data)
            except zstandard.ZstdError as error:
                reason = str(error).removeprefix("zstd decompressor error: ")
                raise DamagedSegment(f"damaged: {reason} (found by byte {self._consumed + len(data)})") from None
            self._consumed += len(data)
            self._produced += len(content)
            out.append(content)
            if not decoder.eof:
                break
            self._end_frame()
            data = decoder.unused_data
            self._consumed -= len(data)
        return b"".join(out)

    def _start_frame(self, data: bytes) -> bytes:
        head = self._head + data
        try:
            params = zstandard.get_frame_parameters(head)
        except zstandard.ZstdError as error:
            if len(head) < _HEADER_MAX and "not enough data" in str(error):
                self._head = head  # wait for the rest of the header
                return b""
            reason = str(error).removeprefix("cannot get frame parameters: ")
            raise DamagedSegment(f"damaged: no zstd frame starts at byte {self._consumed} ({reason})") from None
        self._head = b""
        self._declared = params.content_size if params.content_size != zstandard.CONTENTSIZE_UNKNOWN else None
        self._produced = 0
        self._decoder = _decoder()
        return head

    def _end_frame(self) -> None:
        if self._declared is not None and self._produced != self._declared:
            raise DamagedSegment(
                f"damaged: a frame declares {self._declared} bytes of content but holds {self._produced}"
            )
        self._frames += 1
        self._decoder = None

    def finish(self) -> None:
        """The input ended: raise DamagedSegment unless it held whole frames only, at least one."""
        if self._decoder is not None or self._head:
            started = "" if self._decoder is None else f" ({self._produced} bytes of content decoded)"
            raise DamagedSegment(
                f"truncated: the file ends after {self._consumed + len(self._head)} bytes, inside a zstd frame "
                f"that has not ended{started}"
            )
        if self._frames == 0:
            raise DamagedSegment("empty: 0 bytes, not one zstd frame")


class CheckedReader(io.RawIOBase):
    """The decompressed content of a binary file of zstd frames, checked by `FrameDecoder`: reading it to the
    end raises DamagedSegment if the file is damaged. Closing it closes the file."""

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__()
        self._raw = raw
        self._frames = FrameDecoder()
        self._pending = memoryview(b"")
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._pending and not self._done:
            chunk = self._raw.read(_CHUNK)
            if not chunk:
                self._done = True
                self._frames.finish()
                break
            self._pending = memoryview(self._frames.feed(chunk))
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]  # a view: no copy of the rest
        return size

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


def open_checked(raw: BinaryIO) -> BinaryIO:
    """`raw`'s decompressed content, buffered, whole or DamagedSegment (see `CheckedReader`)."""
    return io.BufferedReader(CheckedReader(raw), buffer_size=_CHUNK)


def declared_size(head: bytes) -> int | None:
    """The content size the first frame's header declares (the node's frames all declare it), from the file's
    first bytes; None when the header is damaged or does not say."""
    try:
        params = zstandard.get_frame_parameters(head[:_HEADER_MAX])
    except zstandard.ZstdError:
        return None
    return (
        None
        if params.content_size in (zstandard.CONTENTSIZE_UNKNOWN, zstandard.CONTENTSIZE_ERROR)
        else int(params.content_size)
    )


def decompress_checked(data: bytes) -> bytes:
    """The content of a whole compressed segment held in memory, or DamagedSegment."""
    frames = FrameDecoder()
    content = frames.feed(data)
    frames.finish()
    return content


__all__ = ["CheckedReader", "DamagedSegment", "FrameDecoder", "declared_size", "decompress_checked", "open_checked"]
