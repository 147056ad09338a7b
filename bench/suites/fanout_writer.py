"""The writer of `python -m bench watch-fanout`, in a process of its own, so that the write's latency is the servers'
and not that of a harness busy reading a thousand watchers' events.

It reads one key per line on stdin, writes it (an HTTP PUT of `1` to every `--http` base URL at once, or a
gRPC Put to etcd at `--etcd`), and answers `SENT ACKED` on stdout: `time.perf_counter()` just before the
request and once it was acknowledged. On Linux that clock is CLOCK_MONOTONIC, the same in every process, so
the harness compares the send time with the times its watchers saw the key.

    python bench/suites/fanout_writer.py --http http://127.0.0.1:9200/_cluster/metadata
    python bench/suites/fanout_writer.py --etcd 127.0.0.1:2379 --stubs DIR
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import click


async def serve(write: Callable[[str], Awaitable[None]]) -> None:
    loop = asyncio.get_running_loop()
    while True:
        key = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
        if not key:
            return
        sent = time.perf_counter()
        await write(key)
        print(f"{sent} {time.perf_counter()}", flush=True)


async def http_writer(bases: list[str]) -> None:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:

        async def put(url: str) -> None:
            async with http.put(url, json=1) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"PUT {url}: {response.status}")

        async def write(key: str) -> None:
            await asyncio.gather(*(put(f"{base}/{key}") for base in bases))

        await serve(write)


async def etcd_writer(address: str, stubs: Path) -> None:
    import grpc

    sys.path.insert(0, str(stubs))
    pb2, pb2_grpc = importlib.import_module("etcd_watch_pb2"), importlib.import_module("etcd_watch_pb2_grpc")
    async with grpc.aio.insecure_channel(address) as channel:
        kv = pb2_grpc.KVStub(channel)

        async def write(key: str) -> None:
            await kv.Put(pb2.PutRequest(key=key.encode(), value=b"1"), timeout=10)

        await serve(write)


@click.command()
@click.option("--http", multiple=True, help="a base URL (repeated: the key is PUT to each, at once)")
@click.option("--etcd", help="the leader's client address")
@click.option("--stubs", type=click.Path(path_type=Path), help="the directory of the generated etcd stubs")
def main(http: tuple[str, ...], etcd: str, stubs: Path) -> None:
    if http:
        asyncio.run(http_writer(list(http)))
    else:
        asyncio.run(etcd_writer(etcd, stubs))


if __name__ == "__main__":
    main()
