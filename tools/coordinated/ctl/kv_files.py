"""What `kv txn` and `kv import` read: a transaction as the API takes it, and the JSON Lines of `kv export`.
Malformed input is a `BadInput` naming the file, before anything is sent. (A module of its own, imported by
those two commands only: msgspec is not needed to start `kv get`.)"""

from __future__ import annotations

from typing import Any

import msgspec

from coordinated.client import Compare
from coordinated.ctl.failures import BadInput


class TxnFile(msgspec.Struct, forbid_unknown_fields=True):
    compare: list[dict[str, Any]] = []
    success: list[dict[str, Any]] = []
    failure: list[dict[str, Any]] = []


class ExportedKey(msgspec.Struct, forbid_unknown_fields=True):
    key: str
    value: Any


def transaction(document: Any, name: str) -> tuple[list[Compare], list[dict[str, Any]], list[dict[str, Any]]]:
    """The compares (every form the API takes: `Compare.from_api`) and the two branches' ops of a document."""
    try:
        spec = msgspec.convert(document, TxnFile)
        compares = [Compare.from_api(compare) for compare in spec.compare]
    except (msgspec.ValidationError, ValueError) as error:
        raise BadInput(f"the transaction in {name}: {error}") from error
    return compares, spec.success, spec.failure


def exported_keys(lines: list[Any], name: str) -> list[ExportedKey]:
    try:
        return [msgspec.convert(line, ExportedKey) for line in lines]
    except msgspec.ValidationError as error:
        raise BadInput(f'{name}: each line is {{"key": ..., "value": ...}}: {error}') from error
