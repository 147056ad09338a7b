"""Commands that `make test` installs: a test that needs one fails, naming what installs it, when it is missing.
A skip would hide a broken install behind a green run."""

from __future__ import annotations

import shutil

import pytest


def require_command(name: str, installer: str) -> str:
    """The path of `name`; fails the test, naming `installer`, when it is not on PATH."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"the {name} command is missing: {installer} installs it (make test-deps)")
    return path
