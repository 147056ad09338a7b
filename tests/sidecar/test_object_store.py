"""The S3 client layer (`coordinated.s3.object_store`) against a real S3-compatible server on loopback."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from pathlib import Path

import pytest
from child_processes import ChildProcesses

from coordinated.s3.object_store import ObjectExists, ObjectMissing, ObjectStore, ObjectStoreError
from coordinated.s3.s3_settings import S3ClientSettings
from coordinated.sidecar.node_settings import sidecar_registry
from coordinated.tools.s3server import S3Server, free_port


def client_settings(server: S3Server, credentials: Path, **overrides: str) -> S3ClientSettings:
    raw = {
        "node.name": "n1",
        "s3.client.default.endpoint": server.address,
        "s3.client.default.protocol": "http",
        "s3.client.default.path_style_access": "true",
        "s3.client.default.credentials_file": str(credentials),
        **{f"s3.client.default.{key}": value for key, value in overrides.items()},
    }
    return S3ClientSettings.from_settings(sidecar_registry().parse(raw), "default")


def run(coroutine_function):  # type: ignore[no-untyped-def]
    async def main():  # type: ignore[no-untyped-def]
        store = ObjectStore()
        try:
            return await coroutine_function(store)
        finally:
            await store.close()

    return asyncio.run(main())


def test_write_once_read_list_and_delete(s3_server: S3Server, tmp_path: Path) -> None:
    settings = client_settings(s3_server, s3_server.credentials_file(tmp_path / "credentials"))

    async def scenario(store: ObjectStore) -> None:
        bucket = store.bucket(settings, "archive")
        await bucket.put_new("base/c1/n1/segment-000000000001.jsonl", b"one\n")
        with pytest.raises(ObjectExists):
            await bucket.put_new("base/c1/n1/segment-000000000001.jsonl", b"other\n")
        assert await bucket.get("base/c1/n1/segment-000000000001.jsonl") == b"one\n", "the first write stays"
        await bucket.put_new("base/c1/n2/segment-000000000001.jsonl", b"two\n")
        listed = await bucket.list("base/c1/")
        assert [(o.key, o.size) for o in listed] == [
            ("base/c1/n1/segment-000000000001.jsonl", 4),
            ("base/c1/n2/segment-000000000001.jsonl", 4),
        ]
        head = await bucket.head("base/c1/n2/segment-000000000001.jsonl")
        assert head is not None and head.size == 4
        assert await bucket.head("base/c1/n3/nothing") is None
        await bucket.delete("base/c1/n2/segment-000000000001.jsonl")
        with pytest.raises(ObjectMissing):
            await bucket.get("base/c1/n2/segment-000000000001.jsonl")
        await bucket.verify()

    run(scenario)


def test_requests_run_on_the_store_thread_not_the_callers_loop(s3_server: S3Server, tmp_path: Path) -> None:
    settings = client_settings(s3_server, s3_server.credentials_file(tmp_path / "credentials"))
    seen: list[str] = []

    async def scenario(store: ObjectStore) -> None:
        async def where(client: object) -> None:
            seen.append(threading.current_thread().name)

        await store.call(settings, "probe", where)  # type: ignore[arg-type]

    run(scenario)
    assert seen == ["s3"], "the S3 work must not run on the caller's (the node's) event loop"


def test_a_wrong_secret_is_a_403_that_names_no_credential(
    s3_server: S3Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = "wrong-" + s3_server.secret_key[::-1]
    settings = client_settings(s3_server, s3_server.credentials_file(tmp_path / "credentials", secret_key=wrong))
    caplog.set_level(logging.DEBUG)

    async def scenario(store: ObjectStore) -> ObjectStoreError:
        with pytest.raises(ObjectStoreError) as raised:
            await store.bucket(settings, "archive").put_new("k", b"x")
        return raised.value

    error = run(scenario)
    assert error.status == 403, error.reason
    assert "s3://archive/k" in error.reason
    for secret in (s3_server.secret_key, wrong, s3_server.access_key):
        assert secret not in error.reason
        assert secret not in caplog.text, "a credential reached the logs"


def test_an_unreachable_service_is_an_error_with_no_status(s3_server: S3Server, tmp_path: Path) -> None:
    credentials = s3_server.credentials_file(tmp_path / "credentials")
    settings = client_settings(s3_server, credentials, endpoint=f"127.0.0.1:{free_port()}", max_retries="0")

    async def scenario(store: ObjectStore) -> ObjectStoreError:
        with pytest.raises(ObjectStoreError) as raised:
            await store.bucket(settings, "archive").list("")
        return raised.value

    error = run(scenario)
    assert error.status is None
    assert "cannot list s3://archive/" in error.reason


def test_the_credentials_file_is_checked_at_startup_without_echoing_it(tmp_path: Path) -> None:
    bad = tmp_path / "credentials"
    bad.write_text("[other]\naws_access_key_id = AKIA-SECRET-ID\n")
    with pytest.raises(ValueError, match=r"has no \[default\] profile") as raised:
        sidecar_registry().parse({"node.name": "n1", "s3.client.default.credentials_file": str(bad)})
    assert "AKIA-SECRET-ID" not in str(raised.value)


def test_concurrent_first_requests_share_one_client(s3_server: S3Server, tmp_path: Path) -> None:
    """Each client holds a connection pool: forty requests at once must not each build (and leak) one."""
    settings = client_settings(s3_server, s3_server.credentials_file(tmp_path / "credentials"))
    created: list[S3ClientSettings] = []

    class CountingStore(ObjectStore):
        async def _create_client(self, settings: S3ClientSettings):  # type: ignore[no-untyped-def]
            created.append(settings)
            return await super()._create_client(settings)

    async def main() -> None:
        store = CountingStore()
        try:
            bucket = store.bucket(settings, "archive")
            await bucket.put("k", b"v")
            created.clear()
            await store.close()  # a fresh loop and no client
            store = CountingStore()
            bucket = store.bucket(settings, "archive")
            assert all(await asyncio.gather(*(bucket.head("k") for _ in range(40))))
        finally:
            await store.close()

    asyncio.run(main())
    assert created == [settings]


def test_a_node_loads_the_s3_client_only_when_it_first_talks_to_an_object_store(processes: ChildProcesses) -> None:
    """aiobotocore and botocore cost a node about 16 MB of memory and a second of start-up: a node without an
    archive or an `s3` repository must not load them."""
    probe = (
        "import sys\n"
        "import coordinated.sidecar.cli, coordinated.sidecar.node\n"
        "print(sorted(name for name in sys.modules if name.split('.')[0] in ('aiobotocore', 'botocore')))\n"
    )
    loaded = processes.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert loaded.stdout.strip() == "[]"
