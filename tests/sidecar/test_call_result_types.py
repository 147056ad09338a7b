"""`Node.call`'s overloads and `client.RESULT_TYPES` say the same thing twice: what each request answers with.

Python's typing cannot build overloads from a mapping (nor a mapping from overloads, for the type checker), so
the two are kept in step by this test: it reads the overloads back with `typing.get_overloads` and fails when
a request is missing from either side or when they name different result types for it.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, overload

from coordinated.coordination import client
from coordinated.coordination.client import ClientRequest, ClusterError, Committed, KvGet, KvPut, ReadValue, Txn
from coordinated.sidecar.node import Node


def _members(annotation: Any) -> set[type]:
    """The classes of a type or of a union of types."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return {member for part in typing.get_args(annotation) for member in _members(part)}
    return {annotation}


def disagreements(call: Callable[..., Any], result_types: Mapping[type, tuple[type, ...]]) -> list[str]:
    """Where `call`'s overloads and `result_types` disagree, each said in a sentence; [] when they agree."""
    found: list[str] = []
    typed: dict[type, set[type]] = {}
    for signature in typing.get_overloads(call):
        hints = typing.get_type_hints(signature)
        returns = _members(hints["return"]) - {ClusterError}
        for request in _members(hints["request"]):
            if request in typed:
                found.append(f"{request.__name__} is in two overloads")
            typed[request] = returns
    for request in sorted(typed.keys() | result_types.keys(), key=lambda cls: cls.__name__):
        overloaded, mapped = typed.get(request), set(result_types.get(request, ()))
        if overloaded is None:
            found.append(f"{request.__name__} has no overload")
        elif request not in result_types:
            found.append(f"{request.__name__} is not in RESULT_TYPES")
        elif overloaded != mapped:
            names = sorted(cls.__name__ for cls in overloaded), sorted(cls.__name__ for cls in mapped)
            found.append(f"{request.__name__}: the overload answers {names[0]}, RESULT_TYPES {names[1]}")
    return found


def test_every_request_has_a_result_type_and_an_overload_that_agree() -> None:
    assert set(client.RESULT_TYPES) == _members(ClientRequest)
    assert len(typing.get_overloads(Node.call)) >= 2, "Node.call's overloads were not found"
    assert disagreements(Node.call, client.RESULT_TYPES) == []


class _Drifted:
    """Overloads that disagree with the mapping in the test below, to show the check catches each way."""

    @overload
    def call(self, request: KvGet) -> Committed | ClusterError: ...
    @overload
    def call(self, request: KvPut | KvGet) -> Committed | ClusterError: ...
    def call(self, request: ClientRequest) -> object:
        return request


def test_the_check_names_each_disagreement() -> None:
    mapping: dict[type, tuple[type, ...]] = {KvGet: (ReadValue,), KvPut: (Committed,), Txn: (Committed,)}
    assert disagreements(_Drifted.call, mapping) == [
        "KvGet is in two overloads",
        "KvGet: the overload answers ['Committed'], RESULT_TYPES ['ReadValue']",
        "Txn has no overload",
    ]
