"""The release version of a checkout and the previous release's revision, read in one place for the e2e harness's
scripts (run as `python3 e2e/release.py version [CHECKOUT]`, standard library only) and for its tests.

The release version is the project package's version (pyproject.toml); the previous release is the revision named
by the first line of compat/previous-release that is not a comment.
"""

from __future__ import annotations

import argparse  # not click, as every other program: the system's python3 runs this, standard library only
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PREVIOUS_RELEASE_FILE = Path("compat") / "previous-release"


def release_version(checkout: Path = REPO) -> str:
    """The release a checkout calls itself (`coordinated-cluster:<it>` is its image)."""
    version: str = tomllib.loads((checkout / "pyproject.toml").read_text())["project"]["version"]
    return version


def previous_revision(checkout: Path = REPO) -> str:
    """The git revision of the previous release, as compat/previous-release names it."""
    path = checkout / PREVIOUS_RELEASE_FILE
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            return line.strip()
    raise ValueError(f"{path} names no revision (every line is blank or a comment)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("what", choices=["version", "previous-revision"])
    parser.add_argument("checkout", nargs="?", type=Path, default=REPO, help="a checkout (default: this one)")
    args = parser.parse_args(argv)
    print(release_version(args.checkout) if args.what == "version" else previous_revision(args.checkout))


if __name__ == "__main__":
    main()
