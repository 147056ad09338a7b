"""One run's results JSON: the machine it ran on, then one section per suite (`peers`, `watch-fanout`,
`history-bytes`, ...). Every suite that is given `--out FILE` adds its section to FILE, so that one run of
several suites is one file, which `python -m bench report` turns into docs/performance.md."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

FORMAT = 1


def package_version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def etcd_version() -> str:
    binary = shutil.which("etcd")
    if binary is None:
        return "not installed"
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False).stdout
    return out.splitlines()[0].replace("etcd Version: ", "") if out else "unknown"


def machine(workdir: Path | None = None) -> dict[str, Any]:
    """What the figures were measured on: CPU, memory, kernel, the data dirs' filesystem, the versions."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    where = workdir or Path(tempfile.gettempdir())
    df = subprocess.run(["df", "-T", str(where)], capture_output=True, text=True, check=False).stdout.splitlines()
    filesystem = df[-1].split()[1] if len(df) > 1 else "unknown"
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "memory_gib": round(int(Path("/proc/meminfo").read_text().split()[1]) / 1024**2),
        "kernel": platform.release(),
        "data_dirs": f"{where} ({filesystem})",
        "load1_at_start": os.getloadavg()[0],
        "versions": {
            "coordinated-cluster": package_version("coordinated-cluster"),
            "etcd": etcd_version(),
            "python": platform.python_version(),
            "aiohttp": package_version("aiohttp"),
            "grpcio": package_version("grpcio"),
            "pysyncobj": package_version("pysyncobj"),
        },
    }


def read(path: Path) -> dict[str, Any]:
    run: dict[str, Any] = json.loads(path.read_text())
    if run.get("format") != FORMAT or not isinstance(run.get("suites"), dict):
        raise ValueError(f"{path}: not a results file of `python -m bench` (format {FORMAT}, with 'suites')")
    return run


def record(path: Path, suite: str, section: dict[str, Any], workdir: Path | None = None) -> None:
    """Add (or replace) `suite`'s section of the results file at `path`, which is created on first use."""
    run: dict[str, Any] = (
        read(path) if path.exists() else {"format": FORMAT, "started": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"}
    )
    run.setdefault("machine", machine(workdir))
    run.setdefault("suites", {})[suite] = {"command": " ".join(["python -m bench", *sys.argv[1:]]), **section}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(run, indent=1) + "\n")
    tmp.replace(path)
