"""Clients that write, delete and linearizably read a few keys through random nodes, recording every
operation with its invocation and completion times for the linearizability checker."""

from __future__ import annotations

import asyncio
import math
import random
import time
from dataclasses import dataclass, field

import aiohttp

from coordinated.simulation.linearizability import MISSING, Operation

KEYS = ("k0", "k1", "k2", "k3", "k4")
# A fresh set of keys every epoch keeps each key's history short: the checker's search grows steeply with
# the length of one key's history (a single key over 75 s did not finish checking in minutes).
KEY_EPOCH_S = 10.0
OP_TIMEOUT_S = 3.0
# The node refused before submitting anything: the write certainly did not happen.
CERTAIN_FAILURES = {"cluster_block_exception", "master_not_discovered_exception"}


@dataclass
class Recorder:
    operations: list[Operation] = field(default_factory=list)
    failed: int = 0  # reads that failed, and writes that certainly did not happen: not constraints
    acked_writes: list[Operation] = field(default_factory=list)
    keys: set[str] = field(default_factory=set)
    ok_times: list[float] = field(default_factory=list)


async def one_op(
    session: aiohttp.ClientSession, url: str, client: int, kind: str, key: str, value: str | None, rec: Recorder
) -> None:
    invoked = time.monotonic()
    status, body = 0, None
    try:
        timeout = aiohttp.ClientTimeout(total=OP_TIMEOUT_S)
        method = {"put": "PUT", "delete": "DELETE", "get": "GET"}[kind]
        # The server gives up before the client does, so most failures come back with a definite answer.
        params = {"timeout": "2s"}
        kwargs = {"json": value} if kind == "put" else {}
        async with session.request(
            method, f"{url}/_cluster/metadata/{key}", params=params, timeout=timeout, **kwargs
        ) as resp:
            status = resp.status
            body = await resp.json(content_type=None)
    except (TimeoutError, aiohttp.ClientError, OSError, ValueError):
        status = 0
    completed = time.monotonic()
    if kind == "get":
        if status in (200, 404):
            result = body["value"] if status == 200 else MISSING
            rec.operations.append(Operation(client, key, "get", invoked, completed, result=result))
            rec.ok_times.append(completed)
        else:
            rec.failed += 1
        return
    if status == 200 or (kind == "delete" and status == 404):
        op = Operation(client, key, kind, invoked, completed, value=value)
        rec.operations.append(op)
        rec.acked_writes.append(op)
        rec.ok_times.append(completed)
    elif isinstance(body, dict) and body.get("error", {}).get("type") in CERTAIN_FAILURES:
        rec.failed += 1
    else:
        # Unknown outcome: it may take effect at any time after its invocation, or never.
        rec.operations.append(Operation(client, key, kind, invoked, math.inf, value=value, certain=False))


async def client_loop(
    client: int, urls: list[str], rng: random.Random, stop: asyncio.Event, rec: Recorder, started: float
) -> None:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        counter = 0
        while not stop.is_set():
            kind = rng.choices(("put", "delete", "get"), weights=(5, 1, 4))[0]
            key = f"e{int((time.monotonic() - started) // KEY_EPOCH_S)}-{rng.choice(KEYS)}"
            rec.keys.add(key)
            counter += 1
            value = f"c{client}-{counter}" if kind == "put" else None
            await one_op(session, rng.choice(urls), client, kind, key, value, rec)
            await asyncio.sleep(rng.uniform(0.0, 0.05))


async def final_reads(urls: list[str], rec: Recorder, deadline_s: float = 60.0) -> dict[str, object]:
    """After healing: read every key linearizably (retrying until the cluster answers) and record the reads."""
    final: dict[str, object] = {}
    deadline = time.monotonic() + deadline_s
    async with aiohttp.ClientSession() as session:
        for key in sorted(rec.keys):
            while key not in final:
                before = len(rec.operations)
                await one_op(session, urls[0], -1, "get", key, None, rec)
                if len(rec.operations) > before:
                    final[key] = rec.operations[-1].result
                elif time.monotonic() > deadline:
                    raise TimeoutError(f"no linearizable read of {key} after the run")
                else:
                    urls.append(urls.pop(0))
                    await asyncio.sleep(0.2)
    return final
