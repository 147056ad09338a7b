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

import aiohttp

from chaos.clients import CERTAIN_FAILURES, KEY_EPOCH_S, OP_TIMEOUT_S, Recorder
from coordinated.simulation.linearizability import MISSING, Operation

LOCK_KEY = "chaos-lock"


async def request(
    session: aiohttp.ClientSession, method: str, url: str, params: dict[str, str], body: Any = None
) -> tuple[int, Any]:
    """(status, body); status 0 when there was no answer."""
    try:
        timeout = aiohttp.ClientTimeout(total=OP_TIMEOUT_S)
        kwargs = {"json": body} if method == "PUT" else {}
        async with session.request(method, url, params={"timeout": "2s", **params}, timeout=timeout, **kwargs) as r:
            return r.status, await r.json(content_type=None)
    except (TimeoutError, aiohttp.ClientError, OSError, ValueError):
        return 0, None


def certainly_failed(body: Any) -> bool:
    return isinstance(body, dict) and body.get("error", {}).get("type") in CERTAIN_FAILURES


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
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        while not stop.is_set():
            key = f"e{int((time.monotonic() - started) // KEY_EPOCH_S)}-counter"
            rec.keys.add(key)
            counters.acked.setdefault(key, 0)
            counters.unknown.setdefault(key, 0)
            url = f"{rng.choice(urls)}/_cluster/metadata/{key}"
            invoked = time.monotonic()
            status, body = await request(session, "GET", url, {})
            completed = time.monotonic()
            if status not in (200, 404):
                rec.failed += 1
                continue
            value, version = (body["value"], body["version"]) if status == 200 else (MISSING, 0)
            rec.operations.append(Operation(client, key, "get", invoked, completed, result=value, version=version))
            rec.ok_times.append(completed)
            new = (0 if value is MISSING else int(value)) + 1
            invoked = time.monotonic()
            status, body = await request(session, "PUT", url, {"if_version": str(version)}, new)
            completed = time.monotonic()
            if status == 200:
                op = Operation(client, key, "put", invoked, completed, value=new, if_version=version)
                rec.operations.append(op)
                rec.ok_times.append(completed)
                counters.acked[key] += 1
            elif status == 409:
                rec.operations.append(
                    Operation(client, key, "put", invoked, completed, value=new, if_version=version, conflict=True)
                )
                rec.ok_times.append(completed)
            elif certainly_failed(body):
                rec.failed += 1
            else:
                rec.operations.append(
                    Operation(client, key, "put", invoked, math.inf, value=new, if_version=version, certain=False)
                )
                counters.unknown[key] += 1
            await asyncio.sleep(rng.uniform(0.0, 0.05))


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


async def read_lock(session: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    return await request(session, "GET", f"{url}/_cluster/metadata/{LOCK_KEY}", {})


async def lock_loop(client: int, urls: list[str], rng: random.Random, stop: asyncio.Event, locks: LockRecord) -> None:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        while not stop.is_set():
            url = rng.choice(urls)
            mine = {"client": client}
            status, body = await request(
                session, "PUT", f"{url}/_cluster/metadata/{LOCK_KEY}", {"op_type": "create"}, mine
            )
            token = body["version"] if status == 200 else None
            if status != 200 and not certainly_failed(body):
                # Held (409), or perhaps created by this very request (no answer): the key says which.
                status, current = await read_lock(session, url)
                if status == 200 and current["value"] == mine:
                    token = current["create_version"]
                elif status == 200:
                    locks.waits += 1
                    await wait_for_delete(session, url, current["version"], stop)
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
            await release(session, urls, rng, token)


async def wait_for_delete(session: aiohttp.ClientSession, url: str, after: int, stop: asyncio.Event) -> None:
    """Until the lock key's delete shows in a watch (or the watch fails: the caller tries again)."""
    while not stop.is_set():
        status, body = await request(
            session, "GET", f"{url}/_cluster/metadata/_watch", {"prefix": LOCK_KEY, "after_version": str(after)}
        )
        if status != 200:
            return
        if any(e["key"] == LOCK_KEY and e["type"] == "delete" for e in body["events"]):
            return
        after = body["version"]


async def release(session: aiohttp.ClientSession, urls: list[str], rng: random.Random, token: int) -> None:
    """Delete the key if it is still ours, retrying through other nodes until the answer is definite."""
    while True:
        url = rng.choice(urls)
        status, _ = await request(session, "DELETE", f"{url}/_cluster/metadata/{LOCK_KEY}", {"if_version": str(token)})
        if status in (200, 404, 409):
            return  # deleted, or gone / replaced: an earlier attempt without an answer took effect
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
