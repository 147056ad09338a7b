"""The `fs` snapshot repository: snapshot files in a directory under one of `path.repo`'s roots.

A snapshot file is written to a temp file, fsynced, linked into place (so that two snapshots of one name cannot
both win) and the directory fsynced: a reader sees a whole snapshot or none. `path.repo` lists the directories
repositories may live under, as in Elasticsearch. File work runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from coordinated.sidecar.features.snapshots import (
    RepositoryUnavailable,
    SnapshotCorrupt,
    SnapshotExists,
    SnapshotMissing,
    SnapshotRepository,
    blob_name,
    name_of,
)
from coordinated.sidecar.storage.durable_files import fsync_dir

T = TypeVar("T")


def snapshot_path(location: Path, name: str) -> Path:
    return location / blob_name(name)


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


class FsRepository(SnapshotRepository):
    def __init__(self, location: Path) -> None:
        self.location = location

    def where(self, name: str) -> str:
        return str(snapshot_path(self.location, name))

    async def verify(self) -> None:
        """Create the directory if needed and write, then remove, a probe file."""

        def probe() -> None:
            self.location.mkdir(parents=True, exist_ok=True)
            path = self.location / f".verify-{uuid.uuid4().hex}"
            path.write_bytes(b"ok")
            path.unlink()

        await self._io(f"cannot write to location [{self.location}]", probe)

    async def put_new(self, name: str, data: bytes) -> None:
        await self._io(f"cannot write to [{self.location}]", lambda: self._write(name, data))

    def _write(self, name: str, data: bytes) -> None:
        self.location.mkdir(parents=True, exist_ok=True)
        final = snapshot_path(self.location, name)
        if final.exists():
            raise SnapshotExists(name)
        tmp = self.location / f".{final.name}.{uuid.uuid4().hex}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, final)  # fails if another writer took the name meanwhile, unlike a rename
        except FileExistsError:
            raise SnapshotExists(name) from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        fsync_dir(self.location)

    async def fetch(self, name: str) -> bytes:
        path = snapshot_path(self.location, name)

        def read() -> bytes:
            try:
                return path.read_bytes()
            except FileNotFoundError:
                raise SnapshotMissing(name) from None
            except OSError as error:
                raise SnapshotCorrupt(f"cannot read snapshot file [{path}]: {error.strerror or error}") from None

        return await asyncio.to_thread(read)

    async def names(self) -> list[tuple[str, float]]:
        def scan() -> list[tuple[str, float]]:
            found = []
            for path in self.location.iterdir() if self.location.is_dir() else ():
                name = name_of(path.name)
                if name is not None:
                    with contextlib.suppress(FileNotFoundError):
                        found.append((name, path.stat().st_mtime))
            return found

        return await self._io(f"cannot list [{self.location}]", scan)

    async def remove(self, name: str) -> None:
        def unlink() -> None:
            try:
                snapshot_path(self.location, name).unlink()
            except FileNotFoundError:
                raise SnapshotMissing(name) from None
            fsync_dir(self.location)

        await self._io(f"cannot delete from [{self.location}]", unlink)

    async def _io(self, what: str, work: Callable[[], T]) -> T:
        try:
            return await asyncio.to_thread(work)
        except OSError as error:
            raise RepositoryUnavailable(f"{what}: {error.strerror or error}") from None
