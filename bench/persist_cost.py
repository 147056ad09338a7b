"""Cost of one durable accept in the persistence layer alone, against the state size: bytes the process
writes (/proc/self/io `write_bytes`, i.e. what reaches the disk, WAL and checkpoints included) and wall time
per one-key change, for whichever source tree PYTHONPATH selects (run it once per tree).

PYTHONPATH=DIR/core:DIR/sidecar .venv/bin/python bench/persist_cost.py [--keys 10 10000 100000] [--writes 50]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from coordinated.coordination.state import KeyVersion, initial_state
from coordinated.sidecar.storage.persistence import FilePersistedState


def written_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    return 0


def measure(keys: int, large: int, writes: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="persist-cost-") as directory:
        persisted = FilePersistedState(Path(directory), "c")
        kv = {f"seed-{i:06d}": {"v": i, "pad": "x" * 20} for i in range(keys)}
        kv.update({f"large-{i}": "L" * 900_000 for i in range(large)})
        state = initial_state("c").replace(
            version=1, state_uuid="v1", kv=kv, kv_versions={key: KeyVersion(1, 1) for key in kv}
        )
        persisted.set_last_accepted_state(state)
        times, sizes = [], []
        for version in range(2, writes + 2):
            key = f"seed-{version % max(keys, 1):06d}"
            state = state.replace(
                version=version,
                state_uuid=f"v{version}",
                kv={**state.kv, key: {"v": -version}},
                kv_versions={**state.kv_versions, key: KeyVersion(version, 1)},
            )
            before, started = written_bytes(), time.perf_counter()
            persisted.set_last_accepted_state(state)
            times.append((time.perf_counter() - started) * 1000)
            sizes.append(written_bytes() - before)
        persisted.close()
    return {"ms_p50": statistics.median(times), "bytes_mean": statistics.fmean(sizes)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--writes", type=int, default=50)
    args = parser.parse_args()
    for name, keys, large in (
        ("10 keys", 10, 0),
        ("10,000 keys", 10_000, 0),
        ("100,000 keys", 100_000, 0),
        ("10 MB", 5_000, 10),
    ):
        figures = measure(keys, large, args.writes)
        print(f"{name}: {figures['ms_p50']:.2f} ms p50 per accept, {figures['bytes_mean'] / 1024:.1f} KiB written")


if __name__ == "__main__":
    main()
