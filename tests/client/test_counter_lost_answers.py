"""The counter's add whose answer is lost, against a scripted node, with the blocking and the asyncio client:
the write was applied but its answer never came (OutcomeUnknown), and the add must count once, not twice."""

from __future__ import annotations

import json
from typing import Any

import httpx
from client_drivers import Driver

from coordinated.client import AsyncCounter, Counter


class Node:
    """One key: GET reads it, a conditional PUT applies if the version matches; the first applied PUT's
    answer is lost (the connection breaks after the write)."""

    def __init__(self) -> None:
        self.value: Any = None
        self.version = 0
        self.applied = 0
        self.lose_next_answer = True

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path in ("/_cat/master", "/"):
            return httpx.Response(404, json={})
        if request.method == "GET":
            if self.value is None:
                error = {"type": "resource_not_found_exception", "reason": "no such key"}
                return httpx.Response(404, json={"error": error, "status": 404})
            body = {"key": "c", "value": self.value, "version": self.version, "create_version": 1}
            return httpx.Response(200, json=body)
        if int(request.url.params["if_version"]) != self.version:
            error = {"type": "version_conflict_engine_exception", "reason": "version conflict"}
            return httpx.Response(409, json={"error": error, "status": 409})
        self.value, self.version = json.loads(request.content), self.version + 1
        self.applied += 1
        if self.lose_next_answer:
            self.lose_next_answer = False
            raise httpx.ReadTimeout("the answer was lost", request=request)
        return httpx.Response(200, json={"key": "c", "term": 1, "version": self.version})


def test_an_add_whose_answer_was_lost_counts_once(driver: Driver) -> None:
    node = Node()
    client = driver.client(["127.0.0.1:1"], handler=node, retry_timeout=1.0)
    counter = driver.pick(Counter, AsyncCounter)(client, "c")
    assert driver.run(counter.add(5)) == 5  # applied, answer lost, recognized on the next read
    assert driver.run(counter.add(1)) == 6
    assert node.applied == 2 and driver.run(counter.get()) == 6
    driver.close(client)
