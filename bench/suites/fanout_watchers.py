"""Watchers of `python -m bench watch-fanout`, in a process of their own: the harness runs several of these, so that
reading ten thousand watchers' events is not one Python process's work.

It opens `--watchers` watches (round-robin over the given servers), prints `live` once every one of them is
live, then, for each key under the prefix that every one of its watchers has seen, prints
`seen KEY T1 T2 ...`: the `time.perf_counter()` (CLOCK_MONOTONIC on Linux, the same in every process) at
which each watcher read it. It runs until stdin closes.

- `--http URL...`: streaming watches (NDJSON over one held HTTP/1.1 response each, read with aiohttp; ours
  and the floor's): live at the first progress line. With `--raw`, read off the sockets without aiohttp.
- `--etcd ADDRESS...`: etcd gRPC Watch streams, over `--channels` connections; live once created.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import click
import msgspec

OPEN_AT_ONCE = 200  # watchers connecting at the same time (the servers' accept queues stay short)


class _Line(msgspec.Struct):
    type: str
    key: str = ""


_LINE = msgspec.json.Decoder(_Line)


class Seen:
    def __init__(self, watchers: int) -> None:
        self.watchers = watchers
        self.live = 0
        self.all_live = asyncio.Event()
        self.times: dict[str, list[float]] = {}

    def went_live(self) -> None:
        self.live += 1
        if self.live == self.watchers:
            self.all_live.set()

    def saw(self, key: str) -> None:
        times = self.times.setdefault(key, [])
        times.append(time.perf_counter())
        if len(times) == self.watchers:
            del self.times[key]
            sys.stdout.write(f"seen {key} {' '.join(f'{t:.6f}' for t in times)}\n")
            sys.stdout.flush()


async def http_watcher(http: aiohttp.ClientSession, url: str, seen: Seen, gate: asyncio.Semaphore) -> None:
    live = False
    await gate.acquire()
    try:
        async with http.get(url) as response:
            if response.status != 200:
                raise RuntimeError(f"GET {url}: {response.status}")
            async for raw in response.content:
                line = _LINE.decode(raw)
                if line.type == "progress":
                    if not live:
                        live = True
                        gate.release()
                        seen.went_live()
                elif line.type == "put":
                    seen.saw(line.key)
    finally:
        if not live:
            gate.release()


async def http_watchers(urls: list[str], count: int, raw: bool) -> None:
    seen = Seen(count)
    gate = asyncio.Semaphore(OPEN_AT_ONCE)
    if raw:
        await run(seen, [asyncio.create_task(raw_watcher(urls[i % len(urls)], seen, gate)) for i in range(count)])
        return
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as http:
        tasks = [asyncio.create_task(http_watcher(http, urls[i % len(urls)], seen, gate)) for i in range(count)]
        await run(seen, tasks)


class RawStream(asyncio.Protocol):
    """An NDJSON stream read straight off the socket: the chunked body parsed in `data_received`, with no
    HTTP client library and no task switch per line (a diagnostic: how much of a delivery is the client's)."""

    def __init__(self, request: bytes, seen: Seen, live: asyncio.Future[None], ended: asyncio.Future[None]) -> None:
        self.request = request
        self.seen = seen
        self.live = live
        self.ended = ended
        self.buffer = b""
        self.in_body = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data
        if not self.in_body:
            head, found, buffer = buffer.partition(b"\r\n\r\n")
            if not found:
                self.buffer = head
                return
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(head.split(b"\r\n", 1)[0].decode())
            self.in_body = True
        while True:
            size_line, found, rest = buffer.partition(b"\r\n")
            if not found:
                break
            size = int(size_line, 16)
            if len(rest) < size + 2:
                break
            for raw in rest[:size].splitlines():
                line = _LINE.decode(raw)
                if line.type == "put":
                    self.seen.saw(line.key)
                elif line.type == "progress" and not self.live.done():
                    self.live.set_result(None)
            buffer = rest[size + 2 :]
        self.buffer = buffer

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ended.done():
            self.ended.set_result(None)


async def raw_watcher(url: str, seen: Seen, gate: asyncio.Semaphore) -> None:
    parts = urlsplit(url)
    request = f"GET {parts.path}?{parts.query} HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode()
    loop = asyncio.get_running_loop()
    live, ended = loop.create_future(), loop.create_future()
    async with gate:
        transport, _ = await loop.create_connection(
            lambda: RawStream(request, seen, live, ended), parts.hostname or "127.0.0.1", parts.port or 80
        )
        await asyncio.wait([live, ended], return_when=asyncio.FIRST_COMPLETED)
    if live.done():
        seen.went_live()
    try:
        await ended
    finally:
        transport.close()


async def etcd_watchers(addresses: list[str], count: int, channels: int, prefix: str, stubs: Path) -> None:
    import grpc

    sys.path.insert(0, str(stubs))
    pb2, pb2_grpc = importlib.import_module("etcd_watch_pb2"), importlib.import_module("etcd_watch_pb2_grpc")
    seen = Seen(count)
    streams = [grpc.aio.insecure_channel(addresses[i % len(addresses)]) for i in range(channels)]
    range_end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    gate = asyncio.Semaphore(OPEN_AT_ONCE)

    async def watcher(index: int) -> None:
        await gate.acquire()
        created = False
        try:
            call = pb2_grpc.WatchStub(streams[index % len(streams)]).Watch()
            create = pb2.WatchCreateRequest(key=prefix.encode(), range_end=range_end.encode())
            await call.write(pb2.WatchRequest(create_request=create))
            async for response in call:
                if response.created and not created:
                    created = True
                    gate.release()
                    seen.went_live()
                for event in response.events:
                    seen.saw(event.kv.key.decode())
        finally:
            if not created:
                gate.release()

    try:
        await run(seen, [asyncio.create_task(watcher(i)) for i in range(count)])
    finally:
        for channel in streams:
            await channel.close()


async def run(seen: Seen, tasks: list[asyncio.Task[None]]) -> None:
    """Until stdin closes; a watcher that fails ends the process (the harness sees it)."""
    stdin = asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    live = asyncio.create_task(seen.all_live.wait())
    await asyncio.wait([live, stdin, *tasks], return_when=asyncio.FIRST_COMPLETED)
    if live.done():
        print("live", flush=True)
        await asyncio.wait([stdin, *tasks], return_when=asyncio.FIRST_COMPLETED)
    for task in tasks:
        if task.done() and task.exception() is not None:
            raise RuntimeError("a watcher failed") from task.exception()
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@click.command()
@click.option("--watchers", type=int, required=True)
@click.option("--http", multiple=True, help="a stream URL (repeated: round-robin)")
@click.option("--etcd", multiple=True, help="a member's client address (repeated: round-robin)")
@click.option("--channels", type=int, default=20)
@click.option("--prefix", default="fan/")
@click.option("--stubs", type=click.Path(path_type=Path))
@click.option("--raw", is_flag=True, help="read the HTTP streams off the sockets, without aiohttp")
def main(
    watchers: int, http: tuple[str, ...], etcd: tuple[str, ...], channels: int, prefix: str, stubs: Path, raw: bool
) -> None:
    if http:
        asyncio.run(http_watchers(list(http), watchers, raw))
    else:
        asyncio.run(etcd_watchers(list(etcd), watchers, channels, prefix, stubs))


if __name__ == "__main__":
    main()
