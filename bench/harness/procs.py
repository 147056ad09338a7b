"""Child processes of the peer benchmarks, tracked by PID and always stopped (also at interpreter exit)."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from bench import ROOT

_LIVE: dict[int, subprocess.Popen[bytes]] = {}


def spawn(argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        # Own session: a Ctrl-C reaches only the harness, which then stops its children by PID.
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    _LIVE[process.pid] = process
    return process


def stop(process: subprocess.Popen[bytes] | None, timeout: float = 5.0) -> None:
    if process is None:
        return
    if process.poll() is None:
        with contextlib.suppress(OSError):
            os.kill(process.pid, signal.SIGCONT)  # a stopped process cannot handle SIGTERM
            process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                process.kill()
            process.wait(timeout=5)
    _LIVE.pop(process.pid, None)


def kill9(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):
        os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
    _LIVE.pop(process.pid, None)


@atexit.register
def stop_everything() -> None:
    for process in list(_LIVE.values()):
        with contextlib.suppress(Exception):
            stop(process, timeout=2)


def module_command(module: str, *args: str) -> list[str]:
    """The command line that runs a module of this package (`bench.suites.X`) in a child process: with
    `bench_env()` it finds the package whatever the child's working directory."""
    return [sys.executable, "-m", module, *args]


def bench_env(first: str | None = None) -> dict[str, str]:
    """This process's environment with the checkout's root on PYTHONPATH (after `first`, a source tree's
    folders in an A/B of code), so that a child started with `module_command` imports this package."""
    env = dict(os.environ)
    parts = [part for part in (first, str(ROOT), env.get("PYTHONPATH")) if part]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env
