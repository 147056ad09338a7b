"""Hooks on Unix sockets go only to sockets in `hooks.unix_socket_dir`: checked at registration and again, with
symlinks resolved, at each notification, which goes to the resolved path. A socket outside (`/var/run/...`, a
`..` escape, a symlink in the folder that points out) is refused and never written to."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from aiohttp import web

from coordinated.coordination.state import ClusterState
from coordinated.sidecar.features.hooks import HookManager, HookSpec
from coordinated.tools.localcluster import LocalCluster


async def receiver(socket: Path, received: list[bytes]) -> web.AppRunner:
    async def handle(request: web.Request) -> web.Response:
        received.append(await request.read())
        return web.Response()

    app = web.Application()
    app.router.add_post("/changed", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.UnixSite(runner, str(socket)).start()
    return runner


@pytest.mark.parametrize(
    ("unix_socket", "says"),
    [
        ("/var/run/docker.sock", "must be in [{folder}] (hooks.unix_socket_dir)"),
        ("../outside.sock", "must be in [{folder}]"),
        ("{folder}/../outside.sock", "must be in [{folder}]"),
        ("{folder}", "must be in [{folder}]"),
        ("escape.sock", "resolves to [{outside}/app.sock], outside [{folder}]"),
    ],
)
def test_a_socket_outside_the_folder_is_refused_at_registration(tmp_path: Path, unix_socket: str, says: str) -> None:
    folder, outside = tmp_path / "hooks", tmp_path / "elsewhere"
    folder.mkdir()
    outside.mkdir()
    (folder / "escape.sock").symlink_to(outside / "app.sock")
    spec = HookSpec(unix_socket=unix_socket.format(folder=folder), path="/changed")
    problem = spec.problem(str(folder))
    assert problem is not None and says.format(folder=folder, outside=outside) in problem, problem
    assert HookSpec(unix_socket="app.sock").problem(str(folder)) is None
    assert HookSpec(unix_socket=str(folder / "sub" / "app.sock")).problem(str(folder)) is None


def test_notifications_go_to_sockets_in_the_folder_and_never_through_a_symlink_out_of_it(tmp_path: Path) -> None:
    folder, outside = tmp_path / "hooks", tmp_path / "elsewhere"
    folder.mkdir()
    outside.mkdir()

    async def scenario() -> None:
        inside_got: list[bytes] = []
        outside_got: list[bytes] = []
        runners = [await receiver(folder / "app.sock", inside_got), await receiver(outside / "other.sock", outside_got)]
        manager = HookManager(tmp_path / "hooks.json", 2.0, str(folder))
        await manager.start()
        try:
            manager.put("named", HookSpec(unix_socket="app.sock", path="/changed"))
            manager.put("absolute", HookSpec(unix_socket=str(folder / "app.sock"), path="/changed"))
            manager.put("link", HookSpec(unix_socket="link.sock", path="/changed"))  # not there yet: fails
            # The link appears after registration, pointing out of the folder.
            os.symlink(outside / "other.sock", folder / "link.sock")
            manager.notify(ClusterState("c", version=7), "n1")
            for _ in range(100):
                hooks = manager.describe()
                if hooks["named"]["delivered"] and hooks["absolute"]["delivered"] and hooks["link"]["failures"]:
                    break
                await asyncio.sleep(0.05)
            hooks = manager.describe()
            assert hooks["named"]["delivered"] == hooks["absolute"]["delivered"] == 1 and len(inside_got) == 2
            assert hooks["link"]["delivered"] == 0 and "outside" in (hooks["link"]["last_error"] or "")
            assert outside_got == [], "nothing went through the symlink"
        finally:
            await manager.close()
            for runner in runners:
                await runner.cleanup()

    asyncio.run(scenario())


def test_the_node_refuses_a_hook_socket_outside_its_folder(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    cluster = make_cluster()
    cluster.settings["hooks.unix_socket_dir"] = str(folder)
    [node] = cluster.bootstrap(1)
    status, body = node.put("/_hooks/app", {"unix_socket": "/var/run/docker.sock", "path": "/x"})
    assert (
        status == 400 and "hooks.unix_socket_dir" in body["error"]["reason"] and str(folder) in body["error"]["reason"]
    )
    status, body = node.put("/_hooks/app", {"unix_socket": "app.sock", "path": "/x"})
    assert status == 201, body
