"""The OpenAPI document through a client generator and back: openapi-python-client generates a client from
docs/openapi.json without dropping an operation, and that client, unchanged, lists, puts, watches several
prefixes on a stream, and snapshots and restores, against a real node with tokens on.

A generator drops an operation whose schema it cannot read (the restore body was once `{"enum": [true]}` with no
type) and sends a parameter declared as one string once (the watch's `prefix`): both would pass a validator."""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from openapi_python_client import generate
from openapi_python_client.config import Config, ConfigFile, MetaType

from coordinated.sidecar.web import openapi
from coordinated.tools.localcluster import FAST_SETTINGS, LocalCluster, LocalNode

ADMIN = "a" * 32
PACKAGE = "coordinated_api"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The generated package, importable as `coordinated_api` for this module's tests."""
    out = tmp_path_factory.mktemp("generated")
    config = Config.from_sources(
        ConfigFile(
            package_name_override=PACKAGE,
            project_name_override=PACKAGE,
            post_hooks=[],  # no formatter run: the code is used as generated
            literal_enums=True,
            # The generator reads no NDJSON: the history and the watch's stream are read as text.
            content_type_overrides={"application/x-ndjson": "text/plain"},
        ),
        MetaType.NONE,
        openapi.DOC,
        "utf-8",
        overwrite=True,
        output_path=out / PACKAGE,
    )
    problems = generate(config=config)
    assert [f"{problem.header}: {problem.detail}" for problem in problems] == []
    sys.path.insert(0, str(out))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(out))
        for name in [name for name in sys.modules if name == PACKAGE or name.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


def api(name: str) -> Any:
    return importlib.import_module(f"{PACKAGE}.api.default.{name}")


def test_every_operation_of_the_document_is_generated(generated: ModuleType) -> None:
    document = openapi.build_document()
    operation_ids = {operation["operationId"] for item in document["paths"].values() for operation in item.values()}
    folder = Path(str(generated.__file__)).parent / "api" / "default"
    assert {path.stem for path in folder.glob("*.py")} - {"__init__"} == operation_ids
    assert "post_snapshot_repo_snap_restore" in operation_ids


@pytest.fixture
def node(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> LocalNode:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"admin {ADMIN}\n")
    settings = {**FAST_SETTINGS, "path.repo": str(tmp_path / "repos"), "http.auth.tokens_file": str(tokens)}
    cluster = make_cluster(settings=settings, client_headers={"Authorization": f"Bearer {ADMIN}"})
    return cluster.bootstrap(1)[0]


def test_the_generated_client_lists_puts_watches_and_restores(generated: ModuleType, node: LocalNode) -> None:
    from coordinated_api import AuthenticatedClient, Client  # type: ignore[import-not-found]
    from coordinated_api.models import RepositoryBody, RestoreBody, SessionBody  # type: ignore[import-not-found]

    client = AuthenticatedClient(base_url=node.url, token=ADMIN, raise_on_unexpected_status=True, timeout=30)
    refused = api("get_cluster_health").sync_detailed(client=Client(base_url=node.url))
    assert refused.status_code == 401 and refused.parsed.error.type_ == "security_exception"

    # Put, then list: the answers parse into the document's types.
    put = api("put_cluster_metadata_key")
    for key, value in (("app/a", {"n": 1}), ("app/b/c", [1, 2]), ("other", "x")):
        written = put.sync_detailed(key=key, client=client, body=value)
        assert written.status_code == 200 and written.parsed.key == key, written.content
    page = api("get_cluster_metadata").sync(client=client, prefix="app/")
    assert [(entry.key, entry.value) for entry in page.keys] == [("app/a", {"n": 1}), ("app/b/c", [1, 2])]
    assert api("get_cluster_metadata").sync(client=client, prefix="app/", count_only="true").count == 2
    created = api("post_sessions").sync_detailed(client=client, body=SessionBody(ttl="30s"))
    assert created.status_code == 201 and created.parsed.id

    # A stream over two prefixes: `prefix` is sent twice, and only their keys' changes come.
    watch = api("get_cluster_metadata_watch")
    assert typing.get_args(inspect.signature(watch.sync).parameters["prefix"].annotation)[0] == list[str]
    request = watch._get_kwargs(prefix=["app/b/", "jobs/"], stream="true")
    with client.get_httpx_client().stream(**request) as stream:
        assert stream.status_code == 200 and stream.headers["content-type"] == "application/x-ndjson"
        lines = stream.iter_lines()
        assert json.loads(next(lines))["type"] == "progress"
        for key in ("other", "app/b/d", "app/a", "jobs/1"):
            assert put.sync_detailed(key=key, client=client, body=key).status_code == 200
        changes = [json.loads(next(lines)) for _ in range(2)]
    assert [(change["type"], change["key"]) for change in changes] == [("put", "app/b/d"), ("put", "jobs/1")]
    polled = watch.sync(client=client, prefix=["app/"], after_version=changes[0]["version"] - 1, timeout="1s")
    assert [event.key for event in polled.events] == ["app/b/d", "app/a"]

    # A repository, a snapshot, a change, then the restore through the operation the generator once dropped.
    registered = api("put_snapshot_repo").sync(
        repo="backups",
        client=client,
        body=RepositoryBody.from_dict({"type": "fs", "settings": {"location": "backups"}}),
    )
    assert registered.acknowledged
    taken = api("put_snapshot_repo_snap").sync(repo="backups", snap="snap-1", client=client, wait_for_completion="true")
    assert taken.snapshot.state == "SUCCESS" and taken.snapshot.snapshot == "snap-1"
    assert api("delete_cluster_metadata_key").sync_detailed(key="app/a", client=client).status_code == 200
    restore = api("post_snapshot_repo_snap_restore")
    restored = restore.sync(repo="backups", snap="snap-1", client=client, body=RestoreBody(include_global_state=True))
    assert restored.snapshot.snapshot == "snap-1" and restored.snapshot.keys == 5
    assert api("get_cluster_metadata_key").sync(key="app/a", client=client).value == "app/a"
    refused_body = restore.sync_detailed(
        repo="backups", snap="snap-1", client=client, body=RestoreBody(include_global_state=False)
    )
    assert refused_body.status_code == 400 and "include_global_state" in refused_body.parsed.error.reason
