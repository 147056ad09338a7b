"""The processes a test starts itself, through the `processes` fixture (tests/conftest.py), which marks the test
integration: `make test-fast` runs none of them."""

from __future__ import annotations

import subprocess
from typing import Any


class ChildProcesses:
    """The processes a test starts itself (a script, the command line, a child it kills): started through here,
    and killed by PID at teardown if still running."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[Any]] = []

    def run(self, args: Any, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        kwargs.setdefault("timeout", 600)  # subprocess.run kills the child when it times out
        return subprocess.run(args, **kwargs)

    def start(self, args: Any, **kwargs: Any) -> subprocess.Popen[Any]:
        process = subprocess.Popen(args, **kwargs)
        self.started.append(process)
        return process

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
