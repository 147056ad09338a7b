"""Local hooks: an application in the pod registers a callback that is told about every applied state.

A hook is an HTTP URL on loopback, or a Unix socket plus a path. The socket must be in the folder
`hooks.unix_socket_dir` (default `/run/coordinated/hooks`: a volume the application and the sidecar share), so
that whoever may register hooks cannot make the node write to any socket the pod can open (a container
runtime's, another service's): a relative `unix_socket` is a name in that folder, an absolute one must lie in
it, and the path is resolved (symlinks followed) again at each notification, which goes to the resolved path.
Each notification is a POST of a small JSON summary of the state (fetch the state itself with `GET /_cluster/state?wait_for_version=N`). Delivery is in
order per hook, and coalescing: a slow hook receives the newest state rather than a growing backlog.
Hooks are kept in DATA_DIR/hooks.json, so they survive a sidecar restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import msgspec

from coordinated.coordination.state import ClusterState
from coordinated.sidecar.features.hooks_settings import HOOKS_UNIX_SOCKET_DIR
from coordinated.sidecar.storage.durable_files import DataDirError, atomic_write, read_checked

log = logging.getLogger("coordinated.hooks")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
MAX_HOOKS = 32


def socket_path(unix_socket: str, folder: str) -> str:
    """Where a hook's socket is: a relative `unix_socket` is a name in `folder`."""
    return os.path.normpath(os.path.join(folder, unix_socket))


def _inside(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder and path != folder


def socket_problem(unix_socket: str, folder: str) -> str | None:
    """Why a hook may not use `unix_socket` now (None: it may): the path, and the path it resolves to, must be in
    `folder` (`hooks.unix_socket_dir`)."""
    path = socket_path(unix_socket, folder)
    if not _inside(path, folder):
        return f"[unix_socket] must be in [{folder}] (hooks.unix_socket_dir), got [{unix_socket}]"
    real_folder = os.path.realpath(folder)
    resolved = os.path.realpath(path)
    if not _inside(resolved, real_folder):
        return (
            f"[unix_socket] [{unix_socket}] resolves to [{resolved}], outside [{folder}] (hooks.unix_socket_dir): "
            "a symlink in the folder points out of it"
        )
    return None


class HookSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    url: str | None = None
    unix_socket: str | None = None  # in `hooks.unix_socket_dir`: a name there, or an absolute path in it
    path: str = "/"

    def problem(self, socket_dir: str) -> str | None:
        if (self.url is None) == (self.unix_socket is None):
            return "give exactly one of [url] and [unix_socket]"
        if self.url is not None:
            parts = urlsplit(self.url)
            if parts.scheme != "http" or parts.hostname not in LOOPBACK_HOSTS:
                return f"[url] must be an http:// URL on loopback ({', '.join(LOOPBACK_HOSTS)}), got [{self.url}]"
        if self.unix_socket is not None and (problem := socket_problem(self.unix_socket, socket_dir)):
            return problem
        if not self.path.startswith("/"):
            return "[path] must start with /"
        return None


class _Hook:
    def __init__(self, name: str, spec: HookSpec) -> None:
        self.name = name
        self.spec = spec
        self.latest: dict[str, Any] | None = None
        self.wakeup = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.delivered = 0
        self.failures = 0
        self.last_error: str | None = None
        self.last_version: int | None = None


class HookManager:
    def __init__(self, path: Path, timeout_s: float, socket_dir: str = HOOKS_UNIX_SOCKET_DIR.default or "/") -> None:
        self.path = path
        self.socket_dir = socket_dir  # `hooks.unix_socket_dir`
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.hooks: dict[str, _Hook] = {}
        self.specs: dict[str, HookSpec] = {}
        if path.exists():
            try:
                self.specs = msgspec.json.decode(read_checked(path), type=dict[str, HookSpec])
            except msgspec.MsgspecError as error:
                raise DataDirError(f"[{path}] is corrupt: {error}") from None
        self.session: aiohttp.ClientSession | None = None
        self.latest: dict[str, Any] | None = None

    async def start(self) -> None:
        self.session = aiohttp.ClientSession(timeout=self.timeout)
        for name, spec in self.specs.items():
            self._activate(name, spec)

    def _activate(self, name: str, spec: HookSpec) -> None:
        hook = _Hook(name, spec)
        hook.task = asyncio.get_running_loop().create_task(self._deliver(hook))
        self.hooks[name] = hook
        if self.latest is not None:  # a new hook hears about the current state at once
            hook.latest = self.latest
            hook.wakeup.set()

    def _save(self) -> None:
        atomic_write(self.path, msgspec.json.encode(self.specs))

    def put(self, name: str, spec: HookSpec) -> bool:
        """Register or replace; True if it was created."""
        created = name not in self.specs
        self.specs[name] = spec
        self._save()
        old = self.hooks.pop(name, None)
        if old is not None and old.task is not None:
            old.task.cancel()
        self._activate(name, spec)
        return created

    def delete(self, name: str) -> bool:
        if name not in self.specs:
            return False
        del self.specs[name]
        self._save()
        hook = self.hooks.pop(name, None)
        if hook is not None and hook.task is not None:
            hook.task.cancel()
        return True

    def describe(self) -> dict[str, Any]:
        out = {}
        for name, hook in sorted(self.hooks.items()):
            out[name] = {
                **msgspec.to_builtins(hook.spec),
                "delivered": hook.delivered,
                "failures": hook.failures,
                "last_error": hook.last_error,
                "last_version": hook.last_version,
            }
        return out

    def notify(self, state: ClusterState, node_id: str) -> None:
        self.latest = {
            "node": node_id,
            "cluster_uuid": state.cluster_uuid,
            "term": state.term,
            "version": state.version,
            "state_uuid": state.state_uuid,
            "master_node": state.master_node,
            "ts": round(time.time(), 6),
        }
        for hook in self.hooks.values():
            hook.latest = self.latest
            hook.wakeup.set()

    async def _deliver(self, hook: _Hook) -> None:
        while True:
            await hook.wakeup.wait()
            hook.wakeup.clear()
            payload, hook.latest = hook.latest, None
            if payload is None:
                continue
            body = json.dumps({"hook": hook.name, **payload}).encode()
            try:
                await self._post(hook.spec, body)
                hook.delivered += 1
                hook.last_version = payload["version"]
                hook.last_error = None
            except (aiohttp.ClientError, TimeoutError, OSError) as error:
                hook.failures += 1
                hook.last_error = f"{type(error).__name__}: {error}"
                log.debug("hook %s failed: %s", hook.name, hook.last_error)

    async def _post(self, spec: HookSpec, body: bytes) -> None:
        headers = {"Content-Type": "application/json"}
        if spec.url is not None:
            assert self.session is not None
            async with self.session.post(spec.url, data=body, headers=headers) as response:
                response.raise_for_status()
            return
        assert spec.unix_socket is not None
        # Checked again at each notification (hooks.json may be older than the setting, a symlink may have
        # changed), and sent to the path as resolved then.
        problem = socket_problem(spec.unix_socket, self.socket_dir)
        if problem is not None:
            raise OSError(problem)
        connector = aiohttp.UnixConnector(path=os.path.realpath(socket_path(spec.unix_socket, self.socket_dir)))
        async with (
            aiohttp.ClientSession(connector=connector, timeout=self.timeout) as session,
            session.post(f"http://localhost{spec.path}", data=body, headers=headers) as response,
        ):
            response.raise_for_status()

    async def close(self) -> None:
        for hook in self.hooks.values():
            if hook.task is not None:
                hook.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await hook.task
        if self.session is not None:
            await self.session.close()
