"""Streaming watches and paged range reads against scripted answers (httpx's MockTransport), for the
blocking and the asyncio client alike: where a dropped stream resumes, what a `gone` line does, and what a
listing whose state is lost mid-way does."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from client_drivers import Driver
from test_client_retries import Script, error, page

from coordinated.client import ListingLost


class Lines(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A streaming answer: these JSON lines, then the end of the body or, with `broken`, a read error."""

    def __init__(self, *lines: dict[str, Any], broken: bool = False) -> None:
        self.chunks = [json.dumps(line).encode() + b"\n" for line in lines]
        self.broken = broken

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks
        if self.broken:
            raise httpx.ReadError("the connection broke")

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        if self.broken:
            raise httpx.ReadError("the connection broke")


def stream(*lines: dict[str, Any], broken: bool = False) -> httpx.Response:
    return httpx.Response(200, stream=Lines(*lines, broken=broken), headers={"Content-Type": "application/x-ndjson"})


def put(key: str, version: int, value: Any = 1) -> dict[str, Any]:
    return {"type": "put", "key": key, "value": value, "version": version}


def progress(version: int) -> dict[str, Any]:
    return {"type": "progress", "version": version}


def watch_params(script: Script, name: str) -> list[str | None]:
    return [request.url.params.get(name) for request in script.requests if "_watch" in request.url.path]


def test_a_stream_broken_mid_version_resumes_without_a_gap_or_a_repeat(driver: Driver) -> None:
    script = Script(
        stream(progress(4), put("app/a", 5), put("app/b", 5), broken=True),
        # The same version again from the start (after 4): a and b were reported, c was not.
        stream(put("app/a", 5), put("app/b", 5), put("app/c", 5), put("app/d", 6), progress(6)),
    )
    client = driver.client(["127.0.0.1:1", "127.0.0.1:2"], handler=script, retry_timeout=2.0)
    events = driver.take(client.watch("app/", after_version=3), 4)
    assert [(e.key, e.version) for e in events] == [("app/a", 5), ("app/b", 5), ("app/c", 5), ("app/d", 6)]
    assert watch_params(script, "after_version") == ["3", "4"]
    assert script.hosts == ["127.0.0.1:1", "127.0.0.1:2"]  # resumed on the other node


def test_a_closed_line_resumes_from_its_version(driver: Driver) -> None:
    script = Script(
        stream(put("app/a", 5), {"type": "closed", "version": 7, "reason": "the watcher fell behind"}),
        stream(put("app/b", 8, value=2)),
    )
    client = driver.client(["127.0.0.1:1"], handler=script, retry_timeout=2.0)
    events = driver.take(client.watch(["app/", "other/"], prev_value=True, filter="put"), 2)
    assert [(e.key, e.version) for e in events] == [("app/a", 5), ("app/b", 8)]
    assert watch_params(script, "after_version") == [None, "7"]
    first = script.requests[0].url.params
    assert first.get_list("prefix") == ["app/", "other/"]
    assert (first["prev_value"], first["filter"], first["stream"]) == ("true", "put", "true")


def test_a_gone_line_re_reads_every_prefix_and_resumes_from_there(driver: Driver) -> None:
    script = Script(
        stream(put("a/x", 3), {"type": "gone", "version": 50, "oldest": 40}),
        httpx.Response(200, json=page(50, [("a/1", 1), ("a/2", 2)], more=True)),
        httpx.Response(200, json=page(50, [("a/3", 3)], more=False)),
        httpx.Response(200, json=page(52, [("b/1", 9)], more=False)),
        # From 50, the oldest re-read: b/1's change at 51 is in what was re-read at 52; a/4's is not.
        stream(put("a/4", 51), put("b/1", 51, value=8), put("b/2", 53)),
    )
    client = driver.client(["127.0.0.1:1"], handler=script, retry_timeout=2.0)
    events = driver.take(client.watch(["a/", "b/"], after_version=2), 9)
    assert [(e.type, e.key, e.version) for e in events] == [
        ("put", "a/x", 3),
        ("reset", "a/", 50),
        ("put", "a/1", 50),
        ("put", "a/2", 50),
        ("put", "a/3", 50),
        ("reset", "b/", 52),
        ("put", "b/1", 52),
        ("put", "a/4", 51),
        ("put", "b/2", 53),
    ]
    assert watch_params(script, "after_version") == ["2", "50"]
    continuation = script.requests[2].url.params
    assert (continuation["at_version"], continuation["after"]) == ("50", "a/2")


def test_a_listing_whose_state_is_lost_lists_again_from_the_first_page(driver: Driver) -> None:
    script = Script(
        httpx.Response(200, json=page(10, [("k/1", 1)], more=True)),
        error(410, "resource_gone_exception"),
        httpx.Response(200, json=page(12, [("k/1", 1)], more=True)),
        httpx.Response(200, json=page(12, [("k/2", 2)], more=False)),
    )
    client = driver.client(["127.0.0.1:1"], handler=script, retry_timeout=2.0)
    listing = driver.run(client.list_prefix("k/", page_size=1))
    assert (listing.version, listing.values()) == (12, {"k/1": 1, "k/2": 2})
    assert [r.url.params.get("at_version") for r in script.requests] == [None, "10", None, "12"]


def test_range_pages_raises_listing_lost_after_the_pages_it_gave(driver: Driver) -> None:
    script = Script(
        httpx.Response(200, json=page(10, [("k/1", 1)], more=True)),
        error(410, "resource_gone_exception"),
    )
    client = driver.client(["127.0.0.1:1"], handler=script, retry_timeout=2.0)
    pages: list[Any] = []

    def collect() -> Any:
        return driver.take_until(client.range_pages("k/", page_size=1), lambda item: pages.append(item) and False)

    with pytest.raises(ListingLost):
        driver.run(collect())
    assert [p.version for p in pages] == [10]


def test_a_stream_refused_with_410_re_reads_like_a_gone_line(driver: Driver) -> None:
    script = Script(
        error(410, "resource_gone_exception"),
        httpx.Response(200, json=page(30, [("a/1", 1)], more=False)),
        stream(put("a/2", 31)),
    )
    client = driver.client(["127.0.0.1:1"], handler=script, retry_timeout=2.0)
    events = driver.take(client.watch("a/", after_version=1), 3)
    assert [(e.type, e.key, e.version) for e in events] == [("reset", "a/", 30), ("put", "a/1", 30), ("put", "a/2", 31)]
    assert watch_params(script, "after_version") == ["1", "30"]


def test_a_malformed_line_is_taken_for_a_broken_stream(driver: Driver) -> None:
    script = Script(
        stream(put("a/1", 5), {"type": "put", "version": 6}),
        stream(put("a/1", 5), put("a/2", 6)),  # version 5 again: it was not known to be complete
    )
    client = driver.client(["127.0.0.1:1"], handler=script, retry_timeout=2.0)
    events = driver.take(client.watch("a/", after_version=4), 2)
    assert [(e.key, e.version) for e in events] == [("a/1", 5), ("a/2", 6)]
    assert watch_params(script, "after_version") == ["4", "4"]
