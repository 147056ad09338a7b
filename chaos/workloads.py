"""The application workloads of a chaos run, next to the plain key clients (clients.py):

- CAS counters: read a counter (value and version), write value + 1 with `?if_version`, through random
  nodes. Every operation goes to the linearizability checker, which models compare-and-set; and each
  counter must end between its acknowledged increments and those plus the increments of unknown outcome.
- A lock with fencing tokens: acquire by creating the lock key (`op_type=create`; the token is the
  version the create returned), write to a fenced resource with the token, release with
  `DELETE ?if_version=token`. A waiter waits for the key's delete with a watch (never by polling). Clients
  are not paused here (nodes are), so holders must be mutually exclusive in real time: each holder's
  interval, from its acquisition's answer to its release's request, overlaps no other; tokens increase from
  holder to holder; the fenced resource never has to refuse a token.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any

from chaos.clients import CALL_ERRORS, KEY_EPOCH_S, Recorder, certainly_failed, close_all, node_clients
from coordinated.client import AsyncClient, NotFound, VersionConflict
from coordinated.simulation.linearizability import MISSING, Operation

LOCK_KEY = "chaos-lock"


@dataclass
class Counters:
    acked: dict[str, int] = field(default_factory=dict)
    unknown: dict[str, int] = field(default_factory=dict)


async def cas_loop(
    client: int,
    urls: list[str],
    rng: random.Random,
    stop: asyncio.Event,
    rec: Recorder,
    counters: Counters,
    started: float,
) -> None:
    clients = node_clients(urls)
    try:
        while not stop.is_set():
            key = f"e{int((time.monotonic() - started) // KEY_EPOCH_S)}-counter"
            rec.keys.add(key)
            counters.acked.setdefault(key, 0)
            counters.unknown.setdefault(key, 0)
            node = clients[rng.choice(urls)]
            invoked = time.monotonic()
            try:
                read = await node.get(key)
                value, version = read.value, read.version
            except NotFound:
                value, version = MISSING, 0
            except CALL_ERRORS:
                rec.failed += 1
                continue
            completed = time.monotonic()
            rec.operations.append(Operation(client, key, "get", invoked, completed, result=value, version=version))
            rec.ok_times.append(completed)
            new = (0 if value is MISSING else int(value)) + 1
            invoked = time.monotonic()
            try:
                await node.cas(key, new, version)
            except VersionConflict:
                completed = time.monotonic()
                rec.operations.append(
                    Operation(client, key, "put", invoked, completed, value=new, if_version=version, conflict=True)
                )
                rec.ok_times.append(completed)
            except CALL_ERRORS as error:
                if certainly_failed(error):
                    rec.failed += 1
                else:
                    rec.operations.append(
                        Operation(client, key, "put", invoked, math.inf, value=new, if_version=version, certain=False)
                    )
                    counters.unknown[key] += 1
            else:
                completed = time.monotonic()
                op = Operation(client, key, "put", invoked, completed, value=new, if_version=version)
                rec.operations.append(op)
                rec.ok_times.append(completed)
                counters.acked[key] += 1
            await asyncio.sleep(rng.uniform(0.0, 0.05))
    finally:
        await close_all(clients)


def check_counters(counters: Counters, final: dict[str, Any]) -> tuple[bool, str]:
    problems = []
    for key, acked in counters.acked.items():
        value = final.get(key, MISSING)
        count = 0 if value is MISSING else int(value)
        if not acked <= count <= acked + counters.unknown[key]:
            problems.append(f"{key}: {count}, but {acked} acknowledged and {counters.unknown[key]} unknown increments")
    total = sum(counters.acked.values())
    return not problems, "; ".join(
        problems
    ) or f"ok ({total} acknowledged increments on {len(counters.acked)} counters)"


@dataclass
class Holding:
    client: int
    token: int
    acquired: float  # when the acquisition's answer arrived
    released: float = math.inf  # when the release was first requested


@dataclass
class LockRecord:
    holdings: list[Holding] = field(default_factory=list)
    highest: int = 0  # the fenced resource: the highest token it has accepted
    accepted: int = 0
    refused: list[str] = field(default_factory=list)
    waits: int = 0

    def fenced_write(self, client: int, token: int) -> None:
        if token < self.highest:
            self.refused.append(f"client {client} wrote with token {token} after token {self.highest}")
            return
        self.highest = token
        self.accepted += 1


async def lock_loop(client: int, urls: list[str], rng: random.Random, stop: asyncio.Event, locks: LockRecord) -> None:
    clients = node_clients(urls)
    try:
        while not stop.is_set():
            node = clients[rng.choice(urls)]
            mine = {"client": client}
            token: int | None = None
            try:
                token = (await node.create(LOCK_KEY, mine)).version
            except CALL_ERRORS as error:
                if not certainly_failed(error):
                    # Held (409), or perhaps created by this very request (no answer): the key says which.
                    try:
                        current = await node.get(LOCK_KEY)
                    except CALL_ERRORS:
                        current = None
                    if current is not None and current.value == mine:
                        token = current.create_version
                    elif current is not None:
                        locks.waits += 1
                        await wait_for_delete(node, current.version, stop)
                        continue
            if token is None:
                await asyncio.sleep(0.05)
                continue
            holding = Holding(client, token, time.monotonic())
            locks.holdings.append(holding)
            for _ in range(3):
                locks.fenced_write(client, token)
                await asyncio.sleep(rng.uniform(0.0, 0.03))
            holding.released = time.monotonic()
            await release(clients, urls, rng, token)
    finally:
        await close_all(clients)


async def wait_for_delete(node: AsyncClient, after: int, stop: asyncio.Event) -> None:
    """Until the lock key's delete shows in a watch (or the watch fails: the caller tries again)."""
    while not stop.is_set():
        try:
            batch = await node.watch_once(LOCK_KEY, after, timeout=2.0)
        except CALL_ERRORS:
            return
        if any(e.key == LOCK_KEY and e.type == "delete" for e in batch.events):
            return
        after = batch.version


async def release(clients: dict[str, AsyncClient], urls: list[str], rng: random.Random, token: int) -> None:
    """Delete the key if it is still ours, retrying through other nodes until the answer is definite."""
    while True:
        try:
            await clients[rng.choice(urls)].delete(LOCK_KEY, if_version=token)
            return
        except (NotFound, VersionConflict):
            return  # gone / replaced: an earlier attempt without an answer took effect
        except CALL_ERRORS:
            await asyncio.sleep(0.1)


def check_lock(locks: LockRecord) -> tuple[bool, str]:
    problems = list(locks.refused)
    holdings = sorted(locks.holdings, key=lambda h: h.acquired)
    tokens = [h.token for h in holdings]
    if len(set(tokens)) != len(tokens):
        problems.append(f"a token was given twice: {tokens}")
    for before, after in itertools.pairwise(holdings):
        if after.acquired < before.released:
            problems.append(
                f"client {after.client} (token {after.token}) acquired while client {before.client} "
                f"(token {before.token}) still held the lock"
            )
        if after.token <= before.token:
            problems.append(f"token {after.token} after token {before.token}")
    detail = (
        f"ok ({len(holdings)} holdings, {locks.accepted} fenced writes, {locks.waits} waits by watch)"
        if not problems
        else "; ".join(problems[:5])
    )
    return not problems, detail
