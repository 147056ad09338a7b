"""Clients that write, delete and linearizably read a few keys through random nodes, recording every
operation with its invocation and completion times for the linearizability checker. They use
`coordinated.client` with one attempt per call to one node, so each recorded outcome is one node's answer."""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from coordinated.client import ApiError, AsyncClient, CoordinatedError, NotFound
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


def node_clients(urls: list[str]) -> dict[str, AsyncClient]:
    """One client per node, each sending one attempt per call to that node alone, so that the history records
    exactly what each node answered. The server gives up (`master_timeout`) before the client does, so most
    failures come back with a definite answer. They share one connection pool (making one costs a TLS
    context, tens of milliseconds that would stall the event loop at the start of the run)."""
    pool = httpx.AsyncClient(limits=httpx.Limits(max_connections=None, max_keepalive_connections=None))
    options: dict[str, Any] = {"retry_timeout": 0, "follow_master": False, "request_timeout": OP_TIMEOUT_S}
    return {url: AsyncClient(url, http=pool, master_timeout=2.0, **options) for url in urls}


async def close_all(clients: dict[str, AsyncClient]) -> None:
    """Closes the pool that `node_clients` made (the clients do not own it)."""
    pools = {id(client.http): client.http for client in clients.values()}
    for pool in pools.values():
        await pool.aclose()


def certainly_failed(error: Exception) -> bool:
    """The node refused before submitting anything: the operation certainly did not happen."""
    return isinstance(error, ApiError) and error.type in CERTAIN_FAILURES


# What a call may raise that leaves its outcome to the history: an error answer, no answer, or an answer
# that did not parse.
CALL_ERRORS = (CoordinatedError, KeyError, TypeError, ValueError)


async def one_op(client: AsyncClient, client_id: int, kind: str, key: str, value: str | None, rec: Recorder) -> None:
    invoked = time.monotonic()
    try:
        if kind == "get":
            try:
                result: object = (await client.get(key)).value
            except NotFound:
                result = MISSING
        elif kind == "put":
            await client.put(key, value)
        else:
            with contextlib.suppress(NotFound):  # deleting a missing key is a delete that took effect
                await client.delete(key)
    except CALL_ERRORS as error:
        completed = time.monotonic()
        if kind == "get" or certainly_failed(error):
            rec.failed += 1
        else:
            # Unknown outcome: it may take effect at any time after its invocation, or never.
            rec.operations.append(Operation(client_id, key, kind, invoked, math.inf, value=value, certain=False))
        return
    completed = time.monotonic()
    if kind == "get":
        rec.operations.append(Operation(client_id, key, "get", invoked, completed, result=result))
    else:
        op = Operation(client_id, key, kind, invoked, completed, value=value)
        rec.operations.append(op)
        rec.acked_writes.append(op)
    rec.ok_times.append(completed)


async def client_loop(
    client: int, urls: list[str], rng: random.Random, stop: asyncio.Event, rec: Recorder, started: float
) -> None:
    clients = node_clients(urls)
    try:
        counter = 0
        while not stop.is_set():
            kind = rng.choices(("put", "delete", "get"), weights=(5, 1, 4))[0]
            key = f"e{int((time.monotonic() - started) // KEY_EPOCH_S)}-{rng.choice(KEYS)}"
            rec.keys.add(key)
            counter += 1
            value = f"c{client}-{counter}" if kind == "put" else None
            await one_op(clients[rng.choice(urls)], client, kind, key, value, rec)
            await asyncio.sleep(rng.uniform(0.0, 0.05))
    finally:
        await close_all(clients)


async def final_reads(urls: list[str], rec: Recorder, deadline_s: float = 60.0) -> dict[str, object]:
    """After healing: read every key linearizably (retrying until the cluster answers) and record the reads."""
    final: dict[str, object] = {}
    deadline = time.monotonic() + deadline_s
    clients = node_clients(urls)
    try:
        for key in sorted(rec.keys):
            while key not in final:
                before = len(rec.operations)
                await one_op(clients[urls[0]], -1, "get", key, None, rec)
                if len(rec.operations) > before:
                    final[key] = rec.operations[-1].result
                elif time.monotonic() > deadline:
                    raise TimeoutError(f"no linearizable read of {key} after the run")
                else:
                    urls.append(urls.pop(0))
                    await asyncio.sleep(0.2)
    finally:
        await close_all(clients)
    return final
