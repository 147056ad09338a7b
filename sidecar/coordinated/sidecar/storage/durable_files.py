"""Small files replaced whole and atomically (the node id, the hooks): temp file, fsync, rename, dir fsync."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

MAGIC = b"COORDINATED1"


class DataDirError(Exception):
    """The data directory cannot be used; the message names the file and what is wrong."""


def atomic_write(path: Path, payload: bytes) -> None:
    """Write `MAGIC sha256 length\\n payload` so that readers see the old file or the new one, never a mix."""
    header = b"%s %s %d\n" % (MAGIC, hashlib.sha256(payload).hexdigest().encode(), len(payload))
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        data = memoryview(header + payload)
        while data:
            data = data[os.write(fd, data) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_checked(path: Path) -> bytes:
    """The payload of a file written by `atomic_write`; raises DataDirError saying what is wrong."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise DataDirError(f"cannot read [{path}]: {error.strerror or error}") from None
    header, sep, payload = data.partition(b"\n")
    parts = header.split(b" ")
    if not sep or len(parts) != 3 or parts[0] != MAGIC:
        raise DataDirError(f"[{path}] is corrupt: missing or malformed header (expected {MAGIC.decode()} ...)")
    try:
        length = int(parts[2])
    except ValueError:
        raise DataDirError(f"[{path}] is corrupt: malformed length in header") from None
    if len(payload) != length:
        raise DataDirError(f"[{path}] is corrupt: truncated, {len(payload)} of {length} payload bytes")
    if hashlib.sha256(payload).hexdigest().encode() != parts[1]:
        raise DataDirError(f"[{path}] is corrupt: checksum mismatch")
    return payload
