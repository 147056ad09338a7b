"""Clusters of real node processes of two releases: the previous one (`compat/previous-release`, run from its own
checkout and virtualenv) and this tree; a workload of writers, linearizable readers and a streaming watcher
that runs while nodes are upgraded, and its checks."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository's `chaos` package, not tests/chaos
from chaos.checks import linearizable, lost_writes
from chaos.clients import CERTAIN_FAILURES, Recorder, client_loop, final_reads
from coordinated.client.watch_stream import StreamPosition, event_of, parse_line
from coordinated.tools.localcluster import LocalCluster, LocalNode
from coordinated.tools.previous_release import PreviousRelease

WATCHED = "w/"  # the sequential writer's keys, which the streaming watcher watches
OLD_RELEASE_GRACE_S = 5.0


class Mixed:
    """A LocalCluster whose nodes run either release; a node keeps its data directory across versions."""

    def __init__(self, workdir: Path, previous: PreviousRelease, settings: dict[str, str] | None = None) -> None:
        self.previous = previous
        self.cluster = LocalCluster(workdir, settings=settings)
        self.killed = 0  # nodes of the previous release killed after their grace period

    @property
    def old_python(self) -> str:
        return str(self.previous.python)

    def bootstrap_old(self, count: int) -> list[LocalNode]:
        return self.cluster.bootstrap(count, python=self.old_python)

    def nodes(self) -> list[LocalNode]:
        return list(self.cluster.nodes.values())

    def runs_old(self, node: LocalNode) -> bool:
        return node.python == self.old_python

    def restart(self, node: LocalNode, python: str) -> None:
        """A graceful stop (SIGTERM), then a start on `python`'s release, as a rolling upgrade (or a rollback)
        does. A node of the previous release that serves a streaming watch does not stop until its HTTP server's
        shutdown timeout (60 s; this release ends the streams first): it gets OLD_RELEASE_GRACE_S, as a pod gets
        its grace period, and is then killed."""
        old = self.runs_old(node)
        code = self.cluster.stop(node, timeout=OLD_RELEASE_GRACE_S if old else 30)
        assert code == 0 or old, f"{node.name} did not stop cleanly ({code})"
        self.killed += code != 0
        self.cluster.start(node.name, python=python)
        self.cluster.wait_http(node, timeout=30)

    def upgrade(self, node: LocalNode) -> None:
        self.restart(node, sys.executable)

    def roll_back(self, node: LocalNode) -> None:
        self.restart(node, self.old_python)

    def master(self) -> LocalNode:
        return self.cluster.wait_master(timeout=60)

    def wait_joined(self, count: int | None = None, timeout: float = 60.0) -> LocalNode:
        """The master, once every running node (or `count`) is in its cluster."""
        wanted = count if count is not None else len(self.cluster.running())
        return self.cluster.wait_master(timeout=timeout, nodes=wanted)

    def health(self, node: LocalNode) -> dict[str, Any]:
        status, body = node.get("/_cluster/health")
        assert status == 200, body
        return body  # type: ignore[no-any-return]

    def wait_moved(self, node: LocalNode, timeout: float = 30.0) -> dict[str, Any]:
        """The health once the cluster's version is this release's (every node's feature on)."""
        deadline = time.monotonic() + timeout
        while True:
            health = self.health(node)
            features = health.get("features") or {}
            if features and all(features.values()):
                return health
            if time.monotonic() > deadline:
                raise AssertionError(f"the cluster did not move to this release: {health}")
            time.sleep(0.2)

    def stop_all(self) -> None:
        self.cluster.stop_all(graceful=False)


@dataclass
class Sequence:
    """What the sequential writer wrote: values 1, 2, 3... to keys w/0..w/3 in turn, one write at a time."""

    acked: list[int] = field(default_factory=list)
    uncertain: list[int] = field(default_factory=list)


async def sequential_writer(urls: list[str], stop: asyncio.Event, written: Sequence) -> None:
    """One write at a time through the nodes in turn: each acknowledged write is its own state version, so a
    watch must report every one of them, in order (writes that share a version are another matter: see
    docs/applications.md on key versions)."""
    value = 0
    async with httpx.AsyncClient(timeout=httpx.Timeout(3.0)) as http:
        while not stop.is_set():
            value += 1
            url = urls[value % len(urls)]
            try:
                response = await http.put(f"{url}/_cluster/metadata/{WATCHED}{value % 4}", json=value)
            except (httpx.HTTPError, OSError):
                written.uncertain.append(value)
                await asyncio.sleep(0.05)
                continue
            if response.status_code == 200:
                written.acked.append(value)
            else:
                body = (
                    response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
                )
                certain = response.status_code < 500 or body.get("error", {}).get("type") in CERTAIN_FAILURES
                if not certain:
                    written.uncertain.append(value)
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.02)


@dataclass
class Watched:
    events: list[tuple[int, str, str, Any]] = field(default_factory=list)  # (version, type, key, value)
    streams: int = 0  # streams opened (one per node it watched through)
    gone: list[str] = field(default_factory=list)  # streams that fell behind a node's change log
    errors: list[str] = field(default_factory=list)


async def watch_loop(urls: list[str], stop: asyncio.Event, seen: Watched) -> None:
    """One streaming watch of the writers' keys, from the start, moved to the next node whenever its stream
    ends (a node restarting), resuming where it stood (`StreamPosition`): every change exactly once."""
    position = StreamPosition(0)
    turn = 0
    async with httpx.AsyncClient(timeout=httpx.Timeout(5.0, read=None)) as http:
        while not stop.is_set():
            url = urls[turn % len(urls)]
            turn += 1
            after = position.resume_after()
            query = f"stream=true&prefix={WATCHED}&after_version={after}"
            try:
                async with http.stream("GET", f"{url}/_cluster/metadata/_watch?{query}") as response:
                    if response.status_code != 200:
                        await asyncio.sleep(0.2)
                        continue
                    seen.streams += 1
                    async for line in response.aiter_lines():
                        if not line.strip():
                            continue
                        message = parse_line(line)
                        kind = message["type"]
                        if kind == "progress":
                            position.progress(message["version"])
                        elif kind == "gone":
                            seen.gone.append(f"{url}: {message}")
                            return
                        elif kind in ("put", "delete"):
                            event = event_of(message)
                            if position.report(event):
                                seen.events.append((event.version, event.type, event.key, event.value))
                        if stop.is_set():
                            return
            except (httpx.HTTPError, OSError) as error:
                seen.errors.append(f"{url}: {type(error).__name__}")
                await asyncio.sleep(0.1)


class Workload:
    """Writers and linearizable readers (`chaos.clients`) and a streaming watcher, through every node, in a
    thread of their own, until `stop`."""

    def __init__(self, nodes: list[LocalNode], writers: int = 2, seed: int = 1) -> None:
        self.urls = [node.url for node in nodes]
        self.writers = writers
        self.seed = seed
        self.recorder = Recorder()
        self.sequence = Sequence()
        self.watched = Watched()
        self.final: dict[str, object] = {}
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def start(self) -> Workload:
        self._thread.start()
        self._started.wait(10)
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as error:  # reported by `stop`
            self.error = error

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._started.set()
        rng = random.Random(self.seed)
        started = time.monotonic()
        tasks = [
            asyncio.create_task(
                client_loop(i, self.urls, random.Random(rng.random()), self._stop, self.recorder, started)
            )
            for i in range(self.writers)
        ]
        tasks.append(asyncio.create_task(sequential_writer(list(self.urls), self._stop, self.sequence)))
        watcher = asyncio.create_task(watch_loop(list(self.urls), self._stop, self.watched))
        await self._stop.wait()
        await asyncio.gather(*tasks)
        await asyncio.sleep(0.5)  # the last writes' changes on their way to the watcher
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        self.final = await final_reads(list(self.urls), self.recorder)

    def stop(self) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(120)
        assert not self._thread.is_alive(), "the workload did not stop"
        if self.error is not None:
            raise self.error

    def check(self) -> None:
        """Linearizable, no acknowledged write lost, and every acknowledged write of the sequential writer seen
        by the watcher exactly once, in order."""
        operations = self.recorder.operations
        acked = self.recorder.acked_writes
        assert len(acked) > 20, f"only {len(acked)} acknowledged writes"
        ok, detail = linearizable(operations)
        assert ok, detail
        lost = lost_writes(acked, self.final, [op for op in operations if op.kind != "get"])
        assert lost == [], lost
        watched = self.watched
        assert watched.gone == [], watched.gone
        seen = [value for _, kind, _, value in watched.events if kind == "put"]
        assert seen == sorted(set(seen)), "the watcher saw a change twice, or out of order"
        assert set(seen) <= set(self.sequence.acked) | set(self.sequence.uncertain), "a change nobody wrote"
        last = seen[-1] if seen else 0
        missing = [value for value in self.sequence.acked if value not in set(seen) and value <= last]
        assert missing == [], f"the watcher missed acknowledged writes {missing[:10]}"
        # The watch saw the writes up to the end (the last few may still have been on their way when it stopped).
        assert len(self.sequence.acked) > 20 and last >= self.sequence.acked[-5], (last, self.sequence.acked[-5:])

    def summary(self) -> dict[str, Any]:
        ops = self.recorder.operations
        return {
            "operations": len(ops),
            "acknowledged_writes": len(self.recorder.acked_writes),
            "uncertain": sum(1 for op in ops if op.completed == math.inf),
            "sequential_writes": len(self.sequence.acked),
            "watched_changes": len(self.watched.events),
            "watch_streams": self.watched.streams,
        }


def history_dirs(mixed: Mixed) -> list[Path]:
    return [node.data_dir / "history" for node in mixed.nodes()]


def audit_ok(dirs: list[Path], report_dir: Path) -> dict[str, Any]:
    """`coordinated audit` of this tree over every node's history (segments of both releases), in this process."""
    from coordinated.audit.cli import main as audit_main

    code = audit_main([*map(str, dirs), "--report-dir", str(report_dir), "--no-html"])
    report = json.loads((report_dir / "audit-report.json").read_text())
    assert code == 0 and report["ok"], (code, report["violations"])
    return report  # type: ignore[no-any-return]


def previous_release_refuses(previous: PreviousRelease, node: LocalNode) -> tuple[int, str]:
    """The previous release started on a node's data directory: its exit code and what it printed."""
    import subprocess

    argv = previous.command(
        "node", "--name", node.name, "--data-dir", str(node.data_dir),
        "--http-port", str(node.http_port), "--transport-port", str(node.transport_port),
    )  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return result.returncode, result.stderr
