"""The least work one replicated write can cost in our stack: a physical anchor for `python -m bench peers`.

One process per node, on what the sidecar uses: uvloop, an aiohttp HTTP front for clients, one WebSocket
stream from each follower to the leader, and SQLite in WAL mode with `synchronous=FULL` (one fdatasync per
commit). Node 0 leads for ever: no terms, elections, checksums, history, metrics or validation. The leader
batches the writes that arrive while a batch is in flight (one publication at a time, as ours does):

1. it sends the batch to every follower, then writes it to its own SQLite (the followers' fsyncs overlap
   its own);
2. each follower writes it to SQLite and acks it; a majority of durable copies commits the batch;
3. with `--apply-round` (Elasticsearch's order, which ours follows) it sends the commit to every follower,
   each applies it in memory and acks, and the leader applies last, once a majority has applied;
   without it (Raft's order) the leader applies at once;
4. the writes are answered. A follower forwards its clients' writes to the leader over its stream.

With `--raw-peers PORT` the followers' streams are plain TCP connections to the leader's PORT instead of
WebSockets: each message is its length (4 bytes) and its JSON. That is the floor of a leaner peer transport.

    python bench/harness/floor_node.py --index I --ports P0,P1,... --data-dir D [--apply-round] [--raw-peers PORT]
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import socket
import sqlite3
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import click
import uvloop
from aiohttp import ClientSession, WSMsgType, web

Write = tuple[str, Any, "asyncio.Future[None]"]


class Stream(Protocol):
    async def send_str(self, data: str) -> None: ...


class RawStream:
    """A peer stream on a plain TCP connection: each message is its length (4 bytes, big-endian) and its JSON."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle delay

    async def send_str(self, data: str) -> None:
        body = data.encode()
        self.writer.write(len(body).to_bytes(4, "big") + body)

    async def messages(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            try:
                size = int.from_bytes(await self.reader.readexactly(4), "big")
                yield json.loads(await self.reader.readexactly(size))
            except asyncio.IncompleteReadError:
                return


async def ws_messages(ws: Any) -> AsyncIterator[dict[str, Any]]:
    async for msg in ws:
        if msg.type != WSMsgType.TEXT:
            return
        yield json.loads(msg.data)


class Store:
    """The durable copy: one row per key, one transaction and one fdatasync per batch."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY, v TEXT)")
        self.applied: dict[str, Any] = {}

    def persist(self, batch: list[list[Any]]) -> None:
        self.db.execute("BEGIN")
        self.db.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", [(k, json.dumps(v)) for k, v in batch])
        self.db.execute("COMMIT")

    def apply(self, batch: list[list[Any]]) -> None:
        self.applied.update((k, v) for k, v in batch)


class Leader:
    def __init__(self, store: Store, followers: int, apply_round: bool) -> None:
        self.store = store
        self.majority = (followers + 1) // 2 + 1
        self.apply_round = apply_round
        self.streams: list[Stream] = []
        self.pending: list[Write] = []
        self.acks: dict[tuple[str, int], asyncio.Future[None]] = {}
        self.counts: dict[tuple[str, int], int] = {}
        self.batch_id = 0
        self.wake = asyncio.Event()

    def submit(self, key: str, value: Any) -> asyncio.Future[None]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pending.append((key, value, done))
        self.wake.set()
        return done

    def acked(self, kind: str, batch_id: int) -> None:
        key = (kind, batch_id)
        if key not in self.acks:
            return  # a late ack: the round already has its majority
        self.counts[key] += 1
        if self.counts[key] >= self.majority and not self.acks[key].done():
            self.acks[key].set_result(None)

    async def _round(self, kind: str, message: dict[str, Any], local: Callable[[], object]) -> None:
        """Send `message` to every follower, run `local` (the leader's own part), wait for a majority."""
        key = (kind, self.batch_id)
        self.acks[key] = asyncio.get_running_loop().create_future()
        self.counts[key] = 0
        data = json.dumps(message)
        for ws in self.streams:
            await ws.send_str(data)
        local()
        self.acked(kind, self.batch_id)
        await self.acks[key]
        del self.acks[key], self.counts[key]

    async def run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            writes, self.pending = self.pending, []
            if not writes:
                continue
            self.batch_id += 1
            batch = [[k, v] for k, v, _ in writes]
            await self._round("a", {"b": self.batch_id, "w": batch}, functools.partial(self.store.persist, batch))
            if self.apply_round:
                await self._round("p", {"c": self.batch_id}, lambda: None)
            self.store.apply(batch)
            for _, _, done in writes:
                if not done.done():
                    done.set_result(None)
            if self.pending:
                self.wake.set()


@dataclass(frozen=True)
class FloorOptions:
    index: int  # this node's place in `ports` (0 leads)
    ports: str  # every node's HTTP port, comma-separated
    data_dir: str
    apply_round: bool
    raw_peers: int | None


async def serve(args: FloorOptions) -> None:
    ports = [int(p) for p in args.ports.split(",")]
    data = Path(args.data_dir)
    data.mkdir(parents=True, exist_ok=True)
    store = Store(data / "floor.sqlite")
    app = web.Application()
    leader = Leader(store, len(ports) - 1, args.apply_round) if args.index == 0 else None
    forwarded: dict[int, asyncio.Future[None]] = {}
    request_ids = itertools.count(1)
    answering: set[asyncio.Future[None]] = set()  # the leader's answers to forwarded writes, in flight
    upstream: list[Any] = []  # a follower's stream to the leader, once connected

    async def put(request: web.Request) -> web.Response:
        value = await request.json()
        key = request.match_info["key"]
        if leader is not None:
            await leader.submit(key, value)
        else:
            rid = next(request_ids)
            answered = forwarded[rid] = asyncio.get_running_loop().create_future()
            await upstream[0].send_str(json.dumps({"f": rid, "k": key, "v": value}))
            try:
                await answered
            finally:
                del forwarded[rid]
        return web.json_response({"result": "ok"})

    async def status(_: web.Request) -> web.Response:
        """Node 0 once every follower's stream is up (the harness waits for that before it writes)."""
        ready = len(leader.streams) == len(ports) - 1 if leader is not None else bool(upstream)
        return web.json_response({"leader": 0 if ready else None})

    async def lead(peer: Stream, messages: AsyncIterator[dict[str, Any]]) -> None:
        """The leader's end of one follower's stream: its acks and forwarded writes."""
        assert leader is not None
        leader.streams.append(peer)
        async for m in messages:
            if "a" in m:
                leader.acked("a", m["a"])
            elif "p" in m:
                leader.acked("p", m["p"])
            else:
                task = asyncio.ensure_future(answer_forwarded(peer, m))
                answering.add(task)
                task.add_done_callback(answering.discard)

    async def stream(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        await lead(ws, ws_messages(ws))
        return ws

    async def raw_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = RawStream(reader, writer)
        await lead(peer, peer.messages())

    async def answer_forwarded(peer: Stream, m: dict[str, Any]) -> None:
        assert leader is not None
        await leader.submit(m["k"], m["v"])
        await peer.send_str(json.dumps({"r": m["f"]}))

    async def follow() -> None:
        """A follower connects its stream to the leader (WebSocket, or plain TCP with --raw-peers)."""
        async with ClientSession() as session:
            while True:
                peer: Stream
                try:
                    if args.raw_peers is None:
                        ws = await session.ws_connect(f"http://127.0.0.1:{ports[0]}/stream", max_msg_size=0)
                        peer, messages = ws, ws_messages(ws)
                    else:
                        raw = RawStream(*await asyncio.open_connection("127.0.0.1", args.raw_peers))
                        peer, messages = raw, raw.messages()
                    break
                except OSError:
                    await asyncio.sleep(0.05)
            await follow_on(peer, messages)

    async def follow_on(peer: Stream, messages: AsyncIterator[dict[str, Any]]) -> None:
        """A follower's end of its stream: persist and ack each batch, apply and ack each commit."""
        batches: dict[int, list[list[Any]]] = {}
        upstream.append(peer)
        async for m in messages:
            if "w" in m:
                store.persist(m["w"])
                batches[m["b"]] = m["w"]
                await peer.send_str(json.dumps({"a": m["b"]}))
            elif "c" in m:
                store.apply(batches.pop(m["c"]))
                await peer.send_str(json.dumps({"p": m["c"]}))
            else:
                forwarded[m["r"]].set_result(None)

    app.router.add_put("/kv/{key}", put)
    app.router.add_get("/status", status)
    app.router.add_get("/stream", stream)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", ports[args.index]).start()
    if leader is not None and args.raw_peers is not None:
        await asyncio.start_server(raw_stream, "127.0.0.1", args.raw_peers)
    await (leader.run() if leader is not None else follow())


@click.command(help=__doc__.splitlines()[0] if __doc__ else None)
@click.option("--index", type=int, required=True, help="this node's place in --ports (0 leads)")
@click.option("--ports", required=True, help="every node's HTTP port, comma-separated")
@click.option("--data-dir", required=True)
@click.option("--apply-round", is_flag=True, help="commit and apply as a second round")
@click.option("--raw-peers", type=int, metavar="PORT", help="peer streams on plain TCP to the leader's PORT")
def main(index: int, ports: str, data_dir: str, apply_round: bool, raw_peers: int | None) -> None:
    uvloop.run(serve(FloorOptions(index, ports, data_dir, apply_round, raw_peers)))


if __name__ == "__main__":
    main()
