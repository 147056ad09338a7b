"""A corpus of damaged history segments, one case per way a file goes bad, for the readers that must name the
damage instead of reading fewer events: the audit (tests/audit/test_damage_corpus.py) and the node
(tests/sidecar/test_history_damage.py).

The base history is real: the previous release's stored 3-node history (tests/audit/data/format1-history), with
node-3 written again as this release writes it, in format 2, in 4 KiB segments whose closed ones are compressed.
It audits ok, and so does every case's `undamaged` control. Each case damages one of node-3's segments and
says which words the reader's message must hold besides the file's name.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import zstandard

from coordinated.sidecar.events.history import HistoryWriter
from coordinated.sidecar.events.history_segments import compress, list_segments

STORED = Path(__file__).parent / "audit" / "data" / "format1-history"
NODE = "node-3"
SEGMENT_SIZE = 4096


def base_history(target: Path) -> Path:
    """The corpus's undamaged history (see the module's docstring) in `target`; returns node-3's folder."""
    shutil.copytree(STORED, target)
    node = target / NODE
    (original,) = list_segments(node)
    events = [json.loads(line) for line in original.path.read_bytes().splitlines()]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    original.path.unlink()
    writer = HistoryWriter(node, SEGMENT_SIZE)
    for event in events:
        writer.append_fields(event)
    writer.close()
    for segment in list_segments(node)[:-1]:
        compress(segment.path)
    return node


def middle_compressed(node: Path) -> Path:
    compressed = [s.path for s in list_segments(node) if s.compressed]
    return compressed[len(compressed) // 2]


def open_plain(node: Path) -> Path:
    return list_segments(node)[-1].path


def _rewrite(path: Path, change: Callable[[bytes], bytes]) -> Path:
    path.write_bytes(change(path.read_bytes()))
    return path


def _flip(position: Callable[[bytes], int]) -> Callable[[bytes], bytes]:
    def flip(data: bytes) -> bytes:
        changed = bytearray(data)
        changed[position(data)] ^= 0x10
        return bytes(changed)

    return flip


def _recompressed(
    change: Callable[[bytes], bytes] = lambda lines: lines, checksum: bool = True
) -> Callable[[bytes], bytes]:
    def recompress(data: bytes) -> bytes:
        lines = change(zstandard.ZstdDecompressor().decompressobj().decompress(data))
        return zstandard.ZstdCompressor(level=3, write_checksum=checksum).compress(lines)

    return recompress


def _format(declared: int) -> Callable[[bytes], bytes]:
    def change(lines: bytes) -> bytes:
        assert lines.startswith(b'{"format":2,')
        return b'{"format":%d,' % declared + lines[len(b'{"format":2,') :]

    return change


@dataclass(frozen=True)
class Damage:
    name: str
    damage: Callable[[Path], Path]  # damages a segment of node-3's folder; returns the damaged file
    words: tuple[str, ...]  # what the reader's message says besides the file's name
    newest: bool = False  # the damaged segment is made the newest (the open plain one removed first)


def _on(pick: Callable[[Path], Path], change: Callable[[bytes], bytes]) -> Callable[[Path], Path]:
    return lambda node: _rewrite(pick(node), change)


CASES: tuple[Damage, ...] = (
    Damage("cut to half", _on(middle_compressed, lambda d: d[: len(d) // 2]), ("truncated",)),
    Damage("cut by its last byte", _on(middle_compressed, lambda d: d[:-1]), ("truncated",)),
    Damage("cut inside the frame header", _on(middle_compressed, lambda d: d[:3]), ("truncated",)),
    Damage("emptied", _on(middle_compressed, lambda d: b""), ("empty",)),
    Damage("flipped in the content", _on(middle_compressed, _flip(lambda d: len(d) // 2)), ("damaged",)),
    Damage("flipped in the checksum", _on(middle_compressed, _flip(lambda d: len(d) - 1)), ("checksum",)),
    Damage("flipped in the magic number", _on(middle_compressed, _flip(lambda d: 1)), ("no zstd frame",)),
    Damage(
        "cut, in a frame without a checksum",
        _on(middle_compressed, lambda d: _recompressed(checksum=False)(d)[:-1]),
        ("truncated",),
    ),
    Damage(
        "of a wrong format version, compressed",
        _on(middle_compressed, _recompressed(_format(3))),
        ("history format [3]", "formats 1 and 2"),
    ),
    Damage(
        "of a wrong format version, plain",
        _on(open_plain, _format(7)),
        ("history format [7]", "formats 1 and 2"),
    ),
    Damage("cut to half, the newest", _on(middle_compressed, lambda d: d[: len(d) // 2]), ("truncated",), True),
)

# Not damage: a frame another tool wrote without a checksum reads whole (its end and content size still checked).
UNDAMAGED = Damage("whole, in a frame without a checksum", _on(middle_compressed, _recompressed(checksum=False)), ())


def damaged_history(target: Path, case: Damage) -> tuple[Path, Path]:
    """The corpus's history with `case`'s damage: (node-3's folder, the damaged file)."""
    node = base_history(target)
    if case.newest:
        # As a node leaves it whose damaged segment is its newest: every later one removed.
        kept = middle_compressed(node)
        for segment in list_segments(node):
            if segment.first_seq > int(kept.name.split("-")[1].split(".")[0]):
                segment.path.unlink()
    return node, case.damage(node)
