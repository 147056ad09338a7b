"""One PySyncObj node with a replicated dict, behind a small aiohttp front so that the benchmark client can
drive it over HTTP like our sidecar. PySyncObj ticks in its own thread; completions come back to the event
loop with call_soon_threadsafe.

    python bench/harness/pysyncobj_node.py --raft 127.0.0.1:R --partners 127.0.0.1:R2,... --http-port P --data-dir D
        [--no-batch] [--tuned]
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click
from aiohttp import web
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated

# Tuned failure detection: election timeout 0.2-0.5 s (default 0.4-1.4 s), heartbeat 50 ms (default 100 ms).
TUNED = {"raftMinTimeout": 0.2, "raftMaxTimeout": 0.5, "appendEntriesPeriod": 0.05, "connectionTimeout": 1.0}


class KV(SyncObj):  # type: ignore[misc]
    def __init__(self, raft: str, partners: list[str], conf: SyncObjConf) -> None:
        super().__init__(raft, partners, conf)
        self.data: dict[str, Any] = {}

    @replicated  # type: ignore[untyped-decorator]
    def set(self, key: str, value: Any) -> None:
        self.data[key] = value


@click.command()
@click.option("--raft", required=True)
@click.option("--partners", required=True)
@click.option("--http-port", type=int, required=True)
@click.option("--data-dir", required=True)
@click.option("--no-batch", is_flag=True)
@click.option("--tuned", is_flag=True)
def main(raft: str, partners: str, http_port: int, data_dir: str, no_batch: bool, tuned: bool) -> None:
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    options: dict[str, Any] = {"journalFile": str(Path(data_dir) / "journal")}  # mmap'd, never fsynced
    if no_batch:
        options["appendEntriesUseBatch"] = False
    if tuned:
        options.update(TUNED)
    kv = KV(raft, partners.split(","), SyncObjConf(**options))

    async def put(request: web.Request) -> web.Response:
        value = await request.json()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()

        def callback(result: Any, error: Any) -> None:
            def resolve() -> None:
                if not done.done():
                    done.set_result(error)

            loop.call_soon_threadsafe(resolve)

        kv.set(request.match_info["key"], value, callback=callback)
        try:
            error = await asyncio.wait_for(done, 30)
        except TimeoutError:
            return web.json_response({"error": "timeout"}, status=503)
        if error != FAIL_REASON.SUCCESS:
            return web.json_response({"error": str(error)}, status=503)
        return web.json_response({"key": request.match_info["key"]})

    async def status(request: web.Request) -> web.Response:
        leader = kv._getLeader()
        return web.json_response({"leader": None if leader is None else str(leader.address)})

    app = web.Application()
    app.router.add_put("/kv/{key}", put)
    app.router.add_get("/status", status)
    web.run_app(app, host="127.0.0.1", port=http_port, print=None, handle_signals=True)


if __name__ == "__main__":
    main()
