"""A short fault run of real node processes, recorded as a history that porcupine-check (tools/porcupine) and
the project's own checker both read.

Seven clients write four keys through every node, each call one attempt to one node (so that each recorded
answer is one node's): unconditional puts and deletes, linearizable reads, and compare-and-sets (a put or now
and then a delete) on the version their own last acknowledged put returned. Meanwhile the master is killed
(-9) and restarted, twice. The history is JSON, `{"operations": [...]}`, in porcupine-check's format (see
tools/porcupine/main.go): times in monotonic nanoseconds, `"return": null` for an outcome left unknown.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import re
import threading
import time
from typing import Any

from coordinated.client import ApiError, AsyncClient, CoordinatedError, NotFound, VersionConflict
from coordinated.simulation.linearizability import MISSING, Operation
from coordinated.tools.localcluster import LocalCluster

KEYS = ("k0", "k1", "k2", "k3")
CLIENTS = 7
# The node refused before submitting anything: the write certainly did not happen.
CERTAIN_FAILURES = {"cluster_block_exception", "master_not_discovered_exception"}
CALL_ERRORS = (CoordinatedError, KeyError, TypeError, ValueError)
_CURRENT_VERSION = re.compile(r"current version \[(\d+)\]")

Record = dict[str, Any]


def found_version(conflict: ApiError) -> int | None:
    """The key's version a 409 names (0: absent), as the server words it; None if it does not say."""
    if conflict.reason.endswith("but no document was found"):
        return 0
    match = _CURRENT_VERSION.search(conflict.reason)
    return int(match.group(1)) if match else None


async def _client(client_id: int, urls: list[str], seed: int, stop: asyncio.Event, ops: list[Record]) -> None:
    rng = random.Random(seed)
    options: dict[str, Any] = {"retry_timeout": 0, "follow_master": False, "request_timeout": 3.0}
    clients = [AsyncClient(url, master_timeout=2.0, **options) for url in urls]
    own: tuple[str, int] | None = None  # the key and version of this client's last acknowledged put
    counter = 0
    try:
        while not stop.is_set():
            counter += 1
            node = rng.choice(clients)
            value = f"c{client_id}-{counter}"
            roll = rng.random()
            if own is not None and roll < 0.4:
                key, if_version = own
                op = "delete" if rng.random() < 0.15 else "put"
            else:
                key, if_version = rng.choice(KEYS), None
                op = "put" if roll < 0.7 else ("get" if roll < 0.9 else "delete")
            record: Record = {"client": client_id, "key": key, "op": op, "if_version": if_version}
            if op == "put":
                record["value"] = value
            own = None
            record["call"] = time.monotonic_ns()
            try:
                if op == "get":
                    try:
                        read = await node.get(key)
                        record.update(value=read.value, version=read.version)
                    except NotFound:
                        record.update(value=None, version=0)
                elif op == "put":
                    written = await (node.put(key, value) if if_version is None else node.cas(key, value, if_version))
                    record["version"] = written.version
                    own = (key, written.version)
                else:
                    with contextlib.suppress(NotFound):  # deleting an absent key is a delete that took effect
                        await node.delete(key, if_version=if_version)
            except VersionConflict as conflict:
                record.update(refused=True, version=found_version(conflict))
            except CALL_ERRORS as error:
                if op == "get" or (isinstance(error, ApiError) and error.type in CERTAIN_FAILURES):
                    continue  # constrains nothing: not recorded
                record["return"] = None  # unknown outcome: it may take effect at any time, or never
                ops.append(record)
                continue
            record["return"] = time.monotonic_ns()
            ops.append(record)
            await asyncio.sleep(rng.uniform(0.0, 0.02))
    finally:
        for client in clients:
            await client.aclose()


def _nemesis(cluster: LocalCluster, seconds: float, seed: int, faults: list[str], stop: threading.Event) -> None:
    """Kill -9 the master every few seconds and restart it."""
    rng = random.Random(seed)
    deadline = time.monotonic() + seconds
    while not stop.wait(rng.uniform(2.0, 3.0)) and time.monotonic() < deadline - 1.0:
        master = cluster.master()
        if master is None:
            continue
        cluster.kill(master)
        faults.append(f"kill -9 {master.name}")
        time.sleep(rng.uniform(0.3, 0.8))
        cluster.start(master.name)


def record_fault_run(cluster: LocalCluster, seconds: float, seed: int) -> tuple[list[Record], list[str]]:
    """Runs the clients for `seconds` while the nemesis kills the master; returns the history and the faults."""
    urls = [node.url for node in cluster.nodes.values()]
    ops: list[Record] = []
    faults: list[str] = []
    stop_nemesis = threading.Event()
    nemesis = threading.Thread(target=_nemesis, args=(cluster, seconds, seed, faults, stop_nemesis), daemon=True)

    async def run() -> None:
        stop = asyncio.Event()
        tasks = [asyncio.create_task(_client(index, urls, seed * 100 + index, stop, ops)) for index in range(CLIENTS)]
        await asyncio.sleep(seconds)
        stop.set()
        await asyncio.gather(*tasks)

    nemesis.start()
    try:
        asyncio.run(run())
    finally:
        stop_nemesis.set()
        nemesis.join(30)
    return ops, faults


def operations(history: list[Record]) -> list[Operation]:
    """The history as the project's checker models it."""
    converted = []
    for record in history:
        done = math.inf if record.get("return") is None else record["return"]
        if record["op"] == "get":
            result = MISSING if record["version"] == 0 else record["value"]
            converted.append(
                Operation(
                    record["client"],
                    record["key"],
                    "get",
                    record["call"],
                    done,
                    result=result,
                    version=record["version"],
                )
            )
            continue
        converted.append(
            Operation(
                record["client"],
                record["key"],
                record["op"],
                record["call"],
                done,
                value=record.get("value"),
                certain=record.get("return") is not None,
                if_version=record.get("if_version"),
                conflict=bool(record.get("refused")),
                version=record.get("version"),
            )
        )
    return converted
