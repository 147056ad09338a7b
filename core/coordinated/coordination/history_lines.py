"""What a complete history line is: the one definition the sidecar's writer and the audit both use.

An event is written as its JSON followed by a newline, in one append. A crash can stop that append part way,
so the bytes after a segment's last newline are a crash-cut line: never an event, whatever they parse as,
even a whole JSON object that lacks only its newline. The writer starts a new segment after a cut line and
gives the next event the seq the cut one would have had; the audit notes the cut line and skips it.
"""

from __future__ import annotations

NEWLINE = b"\n"


def is_complete(line: bytes) -> bool:
    """Whether `line` (as read, with its line ending if it had one) is a whole event line."""
    return line.endswith(NEWLINE)


def ends_with_cut_line(data: bytes) -> bool:
    """Whether a segment whose content ends with `data` ends in a crash-cut line."""
    return bool(data) and not data.endswith(NEWLINE)
