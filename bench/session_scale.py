"""What one session operation costs with few and with many sessions in the cluster state: 3 nodes seeded with
TTL sessions (each with one ephemeral key) so that the creates measured end at 10 or at 10,000 sessions, then, through the master, sequential session
creates, ephemeral puts, keepalives, session ends and plain puts (the sessions measured have `--ttl`, 1h by
default: no checkpoint falls due while they are measured). For each operation: the latency p50, the
master's CPU per operation and the bytes the master's store wrote per operation
(`coordinated_state_bytes_persisted_total`). The goal: the same cost at 10,000 sessions as at 10.

`--source NAME=DIR` also runs another checkout's source tree (e.g. main's, exported with
`git archive main | tar -x -C DIR`), interleaved with this one, round after round.

    flock /tmp/bench.lock .venv/bin/python bench/session_scale.py [--source main=/tmp/main-src] [--ops 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from peers_env import conditions, process_cpu_s
from peers_systems import source_trees
from sidecar_common import percentile
from state_size import SeededOurs

POPULATIONS = (10, 10_000)
OPERATIONS = ("create", "ephemeral put", "keepalive", "end", "plain put")
PERSISTED = "coordinated_state_bytes_persisted_total"


async def persisted_bytes(http: aiohttp.ClientSession, url: str) -> float:
    async with http.get(f"{url}/metrics") as response:
        text = await response.text()
    for line in text.splitlines():
        if line.startswith(PERSISTED + " "):
            return float(line.split()[1])
    raise RuntimeError(f"{PERSISTED} is not in {url}/metrics")


async def checked(response: aiohttp.ClientResponse, expected: int) -> Any:
    body = await response.json()
    if response.status != expected:
        raise RuntimeError(f"{response.method} {response.url}: {response.status} {body}")
    return body


async def measure(system: SeededOurs, ops: int, ttl: str) -> dict[str, dict[str, float]]:
    master = await system.wait_healthy(300)
    url = system._node(master).url
    pid = system.pid(master)
    sessions: list[str] = []
    figures: dict[str, dict[str, float]] = {}
    async with aiohttp.ClientSession() as http:

        async def create(i: int) -> None:
            async with http.post(f"{url}/_sessions", json={"ttl": ttl}) as response:
                sessions.append((await checked(response, 201))["id"])

        async def ephemeral_put(i: int) -> None:
            target = f"{url}/_cluster/metadata/bench-eph/{i}?session={sessions[i]}"
            async with http.put(target, json={"i": i}) as response:
                await checked(response, 200)

        async def keepalive(i: int) -> None:
            async with http.put(f"{url}/_sessions/{sessions[i]}/_keepalive") as response:
                await checked(response, 200)

        async def end(i: int) -> None:
            async with http.delete(f"{url}/_sessions/{sessions[i]}") as response:
                await checked(response, 200)

        async def plain_put(i: int) -> None:
            async with http.put(f"{url}/_cluster/metadata/bench-plain/{i}", json={"i": time.time_ns()}) as response:
                await checked(response, 200)

        steps: dict[str, Callable[[int], Awaitable[None]]] = {
            "create": create,
            "ephemeral put": ephemeral_put,
            "keepalive": keepalive,
            "end": end,
            "plain put": plain_put,
        }
        for name, step in steps.items():
            latencies = []
            cpu_before, bytes_before = process_cpu_s(pid), await persisted_bytes(http, url)
            for i in range(ops):
                started = time.perf_counter()
                await step(i)
                latencies.append(time.perf_counter() - started)
            cpu = process_cpu_s(pid) - cpu_before
            written = await persisted_bytes(http, url) - bytes_before
            figures[name] = {
                "p50_ms": percentile(latencies, 50) * 1000,
                "cpu_ms": cpu / ops * 1000,
                "bytes": written / ops,
            }
    return figures


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    workroot = Path(tempfile.mkdtemp(prefix="session-scale-"))
    variants: list[tuple[str, Path | None]] = [*args.sources, ("branch", None)]
    for round_index in range(args.rounds):
        for population in POPULATIONS:
            for name, source in variants:
                # The creates measured bring the population up to `population` (at most MAX_SESSIONS may exist).
                seeded = max(0, population - args.ops)
                system = SeededOurs(name, source, keys=0, large=0, sessions=seeded)
                workdir = workroot / f"r{round_index}-{population}-{name}"
                before = conditions(workroot)
                try:
                    await system.start(workdir)
                    figures: dict[str, Any] = await measure(system, args.ops, args.ttl)
                except (TimeoutError, RuntimeError, OSError) as error:
                    figures = {"failed": f"{type(error).__name__}: {error} (logs in {workdir})"}
                finally:
                    await system.stop()
                row = {"round": round_index, "sessions": population, "tree": name, **figures, "conditions": before}
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def report(rows: list[dict[str, Any]]) -> str:
    """Per tree and operation: the median over the rounds at each population, and the ratio 10,000 / 10."""
    lines = [
        "| tree | operation | p50 ms (10 / 10,000) | master CPU ms/op (10 / 10,000) | bytes written/op (10 / 10,000) |"
    ]
    lines.append("|---|---|---|---|---|")
    measured = [row for row in rows if "failed" not in row]
    for tree in dict.fromkeys(row["tree"] for row in measured):
        for operation in OPERATIONS:
            cells = []
            for figure in ("p50_ms", "cpu_ms", "bytes"):
                few, many = (
                    [row[operation][figure] for row in measured if row["tree"] == tree and row["sessions"] == count]
                    for count in POPULATIONS
                )
                if not few or not many:
                    cells.append("-")
                    continue
                low, high = statistics.median(few), statistics.median(many)
                ratio = f"{high / low:.2f}x" if low else "-"
                cells.append(
                    f"{low:.2f} / {high:.2f} ({ratio})" if figure != "bytes" else f"{low:.0f} / {high:.0f} ({ratio})"
                )
            lines.append(f"| {tree} | {operation} | {' | '.join(cells)} |")
    for row in rows:
        if "failed" in row:
            lines.append(f"{row['tree']} at {row['sessions']} sessions, round {row['round']}: {row['failed']}")
    loads = [row["conditions"]["load1"] for row in rows]
    lines.append(f"load1 over the phases: {min(loads):.1f}-{max(loads):.1f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", action="append", default=[], metavar="NAME=DIR", help="another source tree")
    parser.add_argument("--ops", type=int, default=200, help="sequential operations of each kind")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--ttl", default="1h", help="of the sessions measured (with 10s, keepalives come after checkpoints)"
    )
    args = parser.parse_args()
    args.sources = source_trees(args.source)
    rows = asyncio.run(run(args))
    print(report(rows))


if __name__ == "__main__":
    main()
