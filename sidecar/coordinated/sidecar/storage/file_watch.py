"""Data files deleted or replaced under a running node.

A running node keeps its files open: SQLite its database and WAL, the history writer its current segment, the
data-directory lock its lock file. Deleting one, or renaming another file over it, does not stop the node: it
goes on writing to a file that no longer has a name, and only the next start finds out (and then refuses, or
starts from older data). `FileWatch` notices it while the node runs. Each file is registered with the identity
it has then (device and inode, from the open descriptor when there is one); `problems` compares that with what
its path names now:

- the path names nothing: the file was deleted (or its directory was);
- the path names another file: it was replaced (a copy put back, a rename over it);
- an open descriptor's file has no name left (`st_nlink == 0`): deleted, even if something else now has the path.

The inode of a file that is still open cannot be reused, so an unchanged identity means the same file. A check
costs one `stat` per file (and one `fstat` per descriptor).

Whoever owns a file registers it (the store its database and WAL, the history writer each new segment, with
`watch`, and `forget` when it closes one) and decides what a problem means for its writes; health, readiness
and the metrics read `problems` of every watch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class FileProblem:
    """A watched file that is gone or replaced."""

    path: str
    what: str  # the file's role, e.g. "the database's WAL"
    reason: str  # "deleted" or "replaced by another file"

    def describe(self) -> str:
        return f"{self.what} [{self.path}] was {self.reason} while the node ran"


@dataclass(frozen=True)
class _Watched:
    what: str
    identity: tuple[int, int]
    fd: int | None


def _identity(stat: os.stat_result) -> tuple[int, int]:
    return (stat.st_dev, stat.st_ino)


class FileWatch:
    def __init__(self) -> None:
        self._files: dict[Path, _Watched] = {}

    def watch(self, path: Path, what: str, fd: int | None = None) -> None:
        """Watch `path` as it is now: the file open as `fd` if given (the caller keeps it open while watched),
        else the file the path names. Raises OSError if there is no such file."""
        stat = os.fstat(fd) if fd is not None else os.stat(path)
        self._files[path] = _Watched(what, _identity(stat), fd)

    def forget(self, path: Path) -> None:
        self._files.pop(path, None)

    def problems(self) -> list[FileProblem]:
        found: list[FileProblem] = []
        for path, watched in self._files.items():
            reason = _reason(path, watched)
            if reason is not None:
                found.append(FileProblem(str(path), watched.what, reason))
        return found


def _reason(path: Path, watched: _Watched) -> str | None:
    if watched.fd is not None:
        try:
            if os.fstat(watched.fd).st_nlink == 0:
                return "deleted"
        except OSError:
            pass  # closed under us: judged by its path below
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return "deleted"
    except OSError as error:
        return f"made unreadable ({error.strerror or error})"
    return None if _identity(now) == watched.identity else "replaced by another file"
