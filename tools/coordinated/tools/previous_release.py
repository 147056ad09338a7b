"""The previous release, for the upgrade tests: the git revision named in `compat/previous-release`, checked out
from this clone with `git worktree add` and installed into a virtualenv of its own, both cached on the machine
under `~/.cache/coordinated-cluster/previous-release/<revision>/` (keyed by the revision, so moving the file
forward at a release gives a new cache entry; an entry is complete once its `ready` file exists).

    python -m coordinated.tools.previous_release            # prepares it if needed; prints the paths as KEY=VALUE
    python -m coordinated.tools.previous_release --revision  # the revision only

`PreviousRelease.python` runs that release's code (`python -m coordinated.cli node ...`): the test harness
(`LocalCluster.start(..., python=...)`) runs its nodes beside this tree's. Preparing takes a lock, so that two
test runs on one machine share the work; it needs the revision in this clone (a CI clone has the whole history)
and the package index, or pip's cache, for the release's dependencies.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click

REPO = Path(__file__).resolve().parents[3]
PIN_FILE = REPO / "compat" / "previous-release"
CACHE = Path(os.environ.get("COORDINATED_CACHE", Path.home() / ".cache" / "coordinated-cluster")) / "previous-release"
# What the tests run of it: the node, the node tool, the audit (Spark) and the client library.
EXTRAS = "audit"
INSTALL_TIMEOUT_S = 900


class PreviousReleaseError(RuntimeError):
    pass


@dataclass(frozen=True)
class PreviousRelease:
    revision: str
    release: str  # its package version, as its `pyproject.toml` says
    tree: Path  # its source tree (a git worktree of this clone)
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def command(self, *args: str) -> list[str]:
        """The `coordinated` command of that release."""
        return [str(self.python), "-m", "coordinated.cli", *args]


def pinned_revision(pin_file: Path = PIN_FILE) -> str:
    """The first line of the pin file that is not blank or a comment."""
    for line in pin_file.read_text().splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return stripped
    raise PreviousReleaseError(f"{pin_file} names no revision")


def _run(argv: list[str], cwd: Path, timeout: float = INSTALL_TIMEOUT_S) -> None:
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise PreviousReleaseError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()[-2000:]}")


def _release_of(tree: Path) -> str:
    import tomllib

    return str(tomllib.loads((tree / "pyproject.toml").read_text())["project"]["version"])


def prepare(repo: Path = REPO, cache: Path = CACHE, revision: str | None = None) -> PreviousRelease:
    """The previous release, checked out and installed (once per machine and revision)."""
    revision = revision or pinned_revision(repo / "compat" / "previous-release")
    home = cache / revision
    home.mkdir(parents=True, exist_ok=True)
    tree, venv, ready = home / "tree", home / f"venv-py{sys.version_info[0]}.{sys.version_info[1]}", home / "ready"
    with open(home / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (ready.exists() and (venv / "bin" / "python").exists() and (tree / "pyproject.toml").exists()):
            ready.unlink(missing_ok=True)
            _checkout(repo, revision, tree)
            _install(tree, venv)
            ready.write_text(revision + "\n")
    return PreviousRelease(revision, _release_of(tree), tree, venv)


def _checkout(repo: Path, revision: str, tree: Path) -> None:
    if (tree / "pyproject.toml").exists():
        return  # a complete checkout from an earlier, interrupted preparation (or another clone's)
    shutil.rmtree(tree, ignore_errors=True)
    _run(["git", "worktree", "prune"], cwd=repo)
    _run(["git", "worktree", "add", "--detach", "--force", str(tree), revision], cwd=repo, timeout=300)


def _install(tree: Path, venv: Path) -> None:
    shutil.rmtree(venv, ignore_errors=True)
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tree)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    # The client from the same tree first: the project pins its exact version, which no index has.
    _run([*pip, str(tree / "client"), f"{tree}[{EXTRAS}]"], cwd=tree)


@click.command("previous_release", help=__doc__)
@click.option("--revision", "revision_only", is_flag=True, help="print the pinned revision only")
def main(revision_only: bool) -> None:
    if revision_only:
        click.echo(pinned_revision())
        return
    try:
        previous = prepare()
    except PreviousReleaseError as error:
        click.echo(f"previous release: {error}", err=True)
        sys.exit(1)
    click.echo(
        f"REVISION={previous.revision}\nRELEASE={previous.release}\nTREE={previous.tree}\nPYTHON={previous.python}"
    )


if __name__ == "__main__":
    main()
