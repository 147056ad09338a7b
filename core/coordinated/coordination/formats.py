"""Format versions of persisted files, and the refusal of a file written by a newer release.

Every persisted form says which format it is in, and (from release 0.2.0 on) which release wrote it:

- the state store (`coordination-state.db`): its `format` is a string, "1" to "3" as release 0.1.0 wrote them;
  from format 4 on a label, `"4 (written by coordinated 0.2.0; ...)"` (`label`), because release 0.1.0 prints
  the value it finds when it refuses one it does not know, and so names the release that wrote it;
- history segments (and so the archive's objects, which are compressed segments): `"format": N` on the first
  line of each segment from format 2 on, with `"release"` from format 3 on (a newer number without a
  `release` is damage, named as such, not a newer release's segment);
- snapshots and audit checkpoints: an integer `format`, and `release`.

A reader refuses a format newer than it knows without changing the file, naming the format, the release that
wrote it and the releases that read it: the node exits with 3, the audit with 2, a restore answers 400. A form
a newer release adds is written only once the cluster's version has moved to that release (see
`node_versions`), so that until then a node can be rolled back to the previous release.

This module imports nothing but the standard library, so the audit's workers can use it.
"""

from __future__ import annotations

import re

_WRITER = re.compile(r"written by coordinated ([^\s;,)]+)")
_READER = re.compile(r"release ([^\s;,)]+) or later reads it")


def label(number: int, writer: str, reader: str) -> str:
    """A format value that names the release that wrote it (`writer`) and the first release that reads it
    (`reader`), for a reader that prints it whole when it does not know it (release 0.1.0's state store)."""
    return (
        f"{number} (written by coordinated {writer}; release {reader} or later reads it: "
        "these files are intact, do not wipe them)"
    )


def parse(value: object) -> tuple[int | None, str | None, str | None]:
    """(the format's number, the release that wrote it, the first release that reads it) of a format value: an
    integer, or a string that starts with one (a `label`); None for what it does not say."""
    if isinstance(value, bool):
        return None, None, None
    if isinstance(value, int):
        return value, None, None
    if not isinstance(value, str):
        return None, None, None
    match = re.match(r"\s*(\d+)", value)
    writer = _WRITER.search(value)
    reader = _READER.search(value)
    return (
        int(match.group(1)) if match else None,
        writer.group(1) if writer else None,
        reader.group(1) if reader else None,
    )


def newer_format_problem(
    what: str, value: object, readable: int, this_release: str, writer: str | None = None
) -> str | None:
    """Why `what` (a file, named for the message) cannot be read by this release, whose newest readable format
    is `readable`, when its format `value` is newer or not a format at all; None when it can be read. `writer`:
    the release that wrote it, when the file says so apart from its format value."""
    number, labelled_writer, reader = parse(value)
    if number is not None and number <= readable:
        return None
    writer = writer or labelled_writer
    written = f"written by coordinated {writer}" if writer else f"written by a release newer than {this_release}"
    if number is None:
        return (
            f"{what} is of format [{value}], which this release ({this_release}) does not know ({written}?); "
            "nothing was changed"
        )
    needed = reader or writer
    run = f"run coordinated {needed} or later on it" if needed else "run the release that wrote it, or a later one"
    return (
        f"{what} is of format {number}, {written}; this release ({this_release}) reads formats up to {readable}. "
        f"Nothing was changed, and the file is not damaged: {run}"
    )
