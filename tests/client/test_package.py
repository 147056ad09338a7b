"""The client as a package of its own: one version with the server, and `pip install ./client` in a fresh
virtualenv gives a typed client (py.typed) that works against a real node, with nothing of the server
installed."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

import coordinated.client
from coordinated.tools.localcluster import LocalCluster

REPO = Path(__file__).resolve().parents[2]
CLIENT = REPO / "client"
# What the project needs beyond the client: none of it may come with `pip install ./client`.
SERVER_ONLY = {"coordinated-cluster", "aiohttp", "msgspec", "immutables", "uvloop", "prometheus-client", "kopf"}


def project(path: Path) -> dict[str, object]:
    return tomllib.loads(path.read_text())["project"]  # type: ignore[no-any-return]


def test_the_client_is_versioned_with_the_server() -> None:
    """The client's version is read from the project's `version` (the release's one source), which it pins."""
    server, client = project(REPO / "pyproject.toml"), project(CLIENT / "pyproject.toml")
    assert "version" not in client and client["dynamic"] == ["version"]
    source = tomllib.loads((CLIENT / "pyproject.toml").read_text())["tool"]["hatch"]["version"]
    assert (CLIENT / source["path"]).resolve() == REPO / "pyproject.toml"
    found = re.search(source["pattern"], (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    assert found is not None and found.group("version") == server["version"]
    assert f"{client['name']}=={server['version']}" in server["dependencies"]  # type: ignore[operator]
    assert coordinated.client.__version__ == importlib.metadata.version("coordinated-client") == server["version"]
    assert set(client["dependencies"]) == {"httpx>=0.27,<1", "tenacity>=8.2,<10"}  # type: ignore[arg-type]
    assert (CLIENT / "coordinated" / "client" / "py.typed").exists()


def test_every_public_name_is_found_where_the_package_says() -> None:
    """The package imports its names when first used: each name of `__all__` has its module, and is there."""
    import importlib

    located = coordinated.client._MODULE_OF
    assert set(located) | {"__version__"} == set(coordinated.client.__all__)
    for name, module in located.items():
        assert getattr(coordinated.client, name) is getattr(importlib.import_module(module), name), name
    with pytest.raises(AttributeError, match="no_such_name"):
        coordinated.client.no_such_name  # noqa: B018


USE = """
import json, sys
from coordinated.client import Client, KeyValue
try:
    import coordinated.coordination
except ModuleNotFoundError:
    server = False
else:
    server = True
with Client(sys.argv[1]) as client:
    client.put("standalone/key", {"from": "a fresh virtualenv"})
    read: KeyValue = client.get("standalone/key")
print(json.dumps({"value": read.value, "server_importable": server}))
"""


@pytest.mark.timeout(300)
def test_pip_install_of_the_client_alone_in_a_fresh_virtualenv(
    tmp_path: Path, make_cluster: Callable[..., LocalCluster]
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    # The index (or PIP_FIND_LINKS and pip's cache) gives httpx, tenacity and the build backend.
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(CLIENT)],
        check=True,
        timeout=240,
    )
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        check=True,
        capture_output=True,
        text=True,
    )
    installed = {entry["name"].lower() for entry in json.loads(listed.stdout)}
    assert {"coordinated-client", "httpx", "tenacity"} <= installed
    assert not installed & SERVER_ONLY, installed & SERVER_ONLY

    node = make_cluster().bootstrap(1)[0]
    script = tmp_path / "use.py"
    script.write_text(USE)
    ran = subprocess.run([str(python), str(script), node.url], check=True, capture_output=True, text=True)
    assert json.loads(ran.stdout) == {"value": {"from": "a fresh virtualenv"}, "server_importable": False}

    # Typed: the installed package carries its py.typed marker, so type checkers read its hints.
    files = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(*m.files('coordinated-client'), sep='\\n')"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert "coordinated/client/py.typed" in files.stdout.splitlines()
