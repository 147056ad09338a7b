"""What the peer transport costs per message, against raw sockets doing the same in the same run.

A master's fan-out in one process on uvloop: each round sends `--per-turn` small messages (a `LeaderCheck`,
about 60 bytes encoded) to each of `--destinations` receivers in one loop turn, then waits until every
receiver has them. Two ways, each in its own child process, alternated `--runs` times:

- `transport`: `PeerSender` to `transport_app` receivers (WebSocket streams, the envelope encoded and
  decoded), as a node sends;
- `anchor`: asyncio streams on TCP loopback, one length-prefixed frame per message, written per
  destination in the same turn and read by a protocol that counts them: the least a message can cost
  through this event loop and kernel.

The figure is the CPU time (= wall time: one process) per round; the best of the runs counts, since the
shared machine only ever slows a run down. `--source DIR` measures the transport of another source tree (its
`core`, `sidecar` and `tools` first on the child's path), for an A/B of a change to the send path in one run.

    .venv/bin/python -m bench transport-send [--destinations 4] [--per-turn 1] [--rounds 5000] [--runs 3]
        [--source DIR]
"""

from __future__ import annotations

import asyncio
import json
import struct
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from bench.harness.procs import bench_env, module_command
from bench.harness.systems import tree_pythonpath

FRAME_HEADER = struct.Struct("!I")


class _Counter:
    """Counts the messages that reached every receiver; wakes the sender once a round's are all in."""

    def __init__(self, per_round: int) -> None:
        self.per_round = per_round
        self.count = 0
        self.round_done = asyncio.Event()

    def arrived(self, messages: int = 1) -> None:
        self.count += messages
        if self.count >= self.per_round:
            self.count -= self.per_round
            self.round_done.set()

    async def wait_round(self) -> None:
        await self.round_done.wait()
        self.round_done.clear()


async def _timed(rounds: int, send_round: Callable[[], None], counter: _Counter) -> float:
    """CPU microseconds per round, after one warm-up round."""
    send_round()
    await counter.wait_round()
    started = time.process_time()
    for _ in range(rounds):
        send_round()
        await counter.wait_round()
    return (time.process_time() - started) / rounds * 1e6


async def measure_transport(destinations: int, per_turn: int, rounds: int) -> float:
    from aiohttp import web

    from coordinated.coordination.messages import LeaderCheck
    from coordinated.sidecar.peers.receiver import transport_app
    from coordinated.sidecar.peers.sender import PeerSender

    counter = _Counter(destinations * per_turn)
    runners, addresses = [], []
    for _ in range(destinations):
        runner = web.AppRunner(transport_app(lambda sender, message: counter.arrived(), None, 1 << 20))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        addresses.append(f"127.0.0.1:{runner.addresses[0][1]}")
    sender = PeerSender("127.0.0.1:1", lambda destination, message: None, None, 5.0, 1.0, 2, 10_000)
    await sender.start()
    message = LeaderCheck(source_id="node-1", request_id=1)

    def send_round() -> None:
        for address in addresses:
            for _ in range(per_turn):
                sender.send(address, message)

    try:
        return await _timed(rounds, send_round, counter)
    finally:
        await sender.close()
        for runner in runners:
            await runner.cleanup()


class _FrameReader(asyncio.Protocol):
    def __init__(self, counter: _Counter) -> None:
        self.counter = counter
        self.buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        frames = 0
        while len(self.buffer) >= FRAME_HEADER.size:
            (length,) = FRAME_HEADER.unpack_from(self.buffer)
            if len(self.buffer) < FRAME_HEADER.size + length:
                break
            del self.buffer[: FRAME_HEADER.size + length]
            frames += 1
        if frames:
            self.counter.arrived(frames)


async def measure_anchor(destinations: int, per_turn: int, rounds: int) -> float:
    loop = asyncio.get_running_loop()
    counter = _Counter(destinations * per_turn)
    servers, writers = [], []
    body = b"x" * 60
    frame = FRAME_HEADER.pack(len(body)) + body
    for _ in range(destinations):
        server = await loop.create_server(lambda: _FrameReader(counter), "127.0.0.1", 0)
        servers.append(server)
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writers.append(writer)

    def send_round() -> None:
        for writer in writers:
            for _ in range(per_turn):
                writer.write(frame)

    try:
        return await _timed(rounds, send_round, counter)
    finally:
        for writer in writers:
            writer.close()
        for server in servers:
            server.close()


def child(kind: str, destinations: int, per_turn: int, rounds: int) -> None:
    import uvloop

    measure = measure_transport if kind == "transport" else measure_anchor
    print(json.dumps({"kind": kind, "us_per_round": uvloop.run(measure(destinations, per_turn, rounds))}))


def run_child(kind: str, destinations: int, per_turn: int, rounds: int, source: Path | None) -> float:
    tree = tree_pythonpath(source.resolve()) if source is not None and kind == "transport" else None
    env = bench_env(tree)
    argv = module_command("bench", "transport-send", "--child", kind, "--destinations", str(destinations))
    argv += ["--per-turn", str(per_turn), "--rounds", str(rounds)]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])["us_per_round"])


def main(destinations: int, per_turn: int, rounds: int, runs: int, source: Path | None) -> None:
    figures: dict[str, list[float]] = {"transport": [], "anchor": []}
    for _ in range(runs):
        for kind in figures:
            figures[kind].append(run_child(kind, destinations, per_turn, rounds, source))
    best = {kind: min(values) for kind, values in figures.items()}
    messages = destinations * per_turn
    label = f"transport ({source})" if source else "transport"
    print(f"{destinations} destination(s) x {per_turn} message(s) per round, {rounds} rounds, ", end="")
    print(f"best of {runs}")
    for kind, value in best.items():
        each = ", ".join(f"{v:.1f}" for v in figures[kind])
        name = label if kind == "transport" else "anchor (raw TCP frames)"
        print(f"  {name}: {value:.1f} us CPU per round, {value / messages:.1f} per message (runs: {each})")
    print(f"  transport / anchor: {best['transport'] / best['anchor']:.2f}x")
