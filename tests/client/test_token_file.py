"""The client's and the command line's token file (`token_file=`, `--token-file`, `COORDINATED_TOKEN_FILE`, and
the pod's projected token at DEFAULT_TOKEN_FILE without any configuration): the token sent follows the file as
the kubelet rotates it (an atomic swap of a symlinked directory), and a file that holds no token is refused
before anything is sent. Against scripted answers (httpx's MockTransport) and a stub HTTP server in a thread;
a real node verifying a real API server's tokens is in tests/operator/test_access_apiserver.py."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from coordinated.cli import cli
from coordinated.client import AsyncClient, Client
from coordinated.client import token_file as token_file_module
from coordinated.client.token_file import TokenFile

BAD_INPUT = 2


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class ProjectedVolume:
    """A projected volume as the kubelet writes it: `token` -> `..data/token`, `..data` -> a timestamped folder,
    each update a new folder and one atomic rename of the `..data` link."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.updates = 0
        root.mkdir(parents=True, exist_ok=True)
        (root / "token").symlink_to("..data/token")

    @property
    def path(self) -> Path:
        return self.root / "token"

    def write(self, token: str) -> None:
        self.updates += 1
        folder = self.root / f"..2025_01_01_00_00_{self.updates:02d}"
        folder.mkdir()
        (folder / "token").write_text(token)
        link = self.root / "..data_tmp"
        link.symlink_to(folder.name)
        os.replace(link, self.root / "..data")


@pytest.fixture
def volume(tmp_path: Path) -> ProjectedVolume:
    projected = ProjectedVolume(tmp_path / "serviceaccount")
    projected.write("first.token.value")
    return projected


def test_the_token_follows_the_kubelets_swaps_looked_at_once_a_second(volume: ProjectedVolume) -> None:
    clock = Clock()
    token = TokenFile(volume.path, clock=clock)
    assert token.current() == "first.token.value"
    volume.write("second.token.value\n")
    clock.now += 0.5
    assert token.current() == "first.token.value"  # not looked at again within the second
    clock.now += 0.5
    assert token.current() == "second.token.value"


def test_a_file_that_holds_no_token_is_refused_at_once_and_a_moment_without_one_keeps_the_last(
    volume: ProjectedVolume, tmp_path: Path
) -> None:
    for content, reason in (("", "holds no token"), ("two words", "more than one word")):
        (tmp_path / "bad").write_text(content)
        with pytest.raises(ValueError, match=reason):
            TokenFile(tmp_path / "bad")
    with pytest.raises(ValueError, match=r"cannot read the token file .*missing"):
        TokenFile(tmp_path / "missing")
    clock = Clock()
    token = TokenFile(volume.path, clock=clock)
    volume.write("")  # caught between two writes
    clock.now += 1
    assert token.current() == "first.token.value"
    volume.write("third.token.value")
    clock.now += 1
    assert token.current() == "third.token.value"


def recording_transport(seen: list[str | None]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Authorization"))
        return httpx.Response(200, json={"principal": "p", "realm": "kubernetes", "roles": [], "admin": False})

    return httpx.MockTransport(answer)


def test_both_clients_send_the_token_the_file_holds_now(
    volume: ProjectedVolume, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(token_file_module, "CHECK_INTERVAL_S", 0.0)
    seen: list[str | None] = []
    with Client("http://a:9200", token_file=volume.path, http=httpx.Client(transport=recording_transport(seen))) as c:
        c.authenticate()
        volume.write("rotated.token.value")
        c.authenticate()

    async def run() -> None:
        http = httpx.AsyncClient(transport=recording_transport(seen))
        async with AsyncClient("http://a:9200", token_file=str(volume.path), http=http) as client:
            await client.authenticate()
            volume.write("rotated.again.value")
            await client.authenticate()
        await http.aclose()

    asyncio.run(run())
    assert seen == [
        "Bearer first.token.value",
        "Bearer rotated.token.value",
        "Bearer rotated.token.value",
        "Bearer rotated.again.value",
    ]


def test_in_a_pod_with_the_projected_token_nothing_needs_configuring(
    volume: ProjectedVolume, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[str | None] = []
    transport = recording_transport(seen)
    monkeypatch.delenv("COORDINATED_TOKEN", raising=False)
    monkeypatch.delenv("COORDINATED_TOKEN_FILE", raising=False)
    monkeypatch.setattr(token_file_module, "DEFAULT_TOKEN_FILE", str(tmp_path / "nothing-here"))
    Client(http=httpx.Client(transport=transport)).authenticate()  # no file at the path: no token
    monkeypatch.setattr(token_file_module, "DEFAULT_TOKEN_FILE", str(volume.path))
    Client(http=httpx.Client(transport=transport)).authenticate()
    Client.from_env(http=httpx.Client(transport=transport)).authenticate()
    Client(token="given-token", http=httpx.Client(transport=transport)).authenticate()  # a token wins
    other = tmp_path / "other-token"
    other.write_text("from.the.environment")
    monkeypatch.setenv("COORDINATED_TOKEN_FILE", str(other))
    Client.from_env(http=httpx.Client(transport=transport)).authenticate()
    monkeypatch.setenv("COORDINATED_TOKEN", "env-token")
    Client.from_env(http=httpx.Client(transport=transport)).authenticate()  # COORDINATED_TOKEN wins
    assert seen == [
        None,
        "Bearer first.token.value",
        "Bearer first.token.value",
        "Bearer given-token",
        "Bearer from.the.environment",
        "Bearer env-token",
    ]
    with pytest.raises(ValueError, match="not both"):
        Client(token="t", token_file=volume.path)


class Stub(http.server.BaseHTTPRequestHandler):
    seen: list[str | None] = []

    def do_GET(self) -> None:
        Stub.seen.append(self.headers.get("Authorization"))
        body = json.dumps(
            {"principal": "system:serviceaccount:a:b", "realm": "kubernetes", "roles": [], "admin": False}
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stub() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Stub.seen = []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_the_command_line_takes_the_token_file_by_option_environment_or_the_pods_path(
    stub: str, volume: ProjectedVolume, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = CliRunner()
    env = {"COORDINATED_ENDPOINTS": stub, "COORDINATED_TOKEN": None, "COORDINATED_TOKEN_FILE": None}
    done = runner.invoke(cli, ["auth", "whoami", "-o", "json", "--token-file", str(volume.path)], env=env)
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["principal"] == "system:serviceaccount:a:b"
    other = tmp_path / "token"
    other.write_text("environment.token")
    done = runner.invoke(cli, ["auth", "whoami"], env={**env, "COORDINATED_TOKEN_FILE": str(other)})
    assert done.exit_code == 0, done.output
    monkeypatch.setattr(token_file_module, "DEFAULT_TOKEN_FILE", str(volume.path))
    assert runner.invoke(cli, ["auth", "whoami"], env=env).exit_code == 0
    done = runner.invoke(cli, ["auth", "whoami", "--token", "explicit"], env=env)
    assert done.exit_code == 0, done.output
    assert Stub.seen == [
        "Bearer first.token.value",
        "Bearer environment.token",
        "Bearer first.token.value",
        "Bearer explicit",
    ]
    (tmp_path / "empty").write_text("")
    done = runner.invoke(cli, ["auth", "whoami", "--token-file", str(tmp_path / "empty")], env=env)
    assert done.exit_code == BAD_INPUT, done.output
    assert "--token-file: the token file" in done.output and "holds no token" in done.output
    assert len(Stub.seen) == 4  # nothing was sent
