"""A linearizability checker for key-value histories (Wing & Gong search with Lowe's memoization).

Keys are independent registers, so each key's history is checked on its own (P-compositionality).
An operation whose outcome is unknown (it failed but may have taken effect) may be linearized anywhere
after its invocation, or not at all.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MISSING: Any = ("<missing>",)  # the value of an absent key


@dataclass(frozen=True)
class Operation:
    client: int
    key: str
    kind: str  # "put", "delete" or "get"
    invoked: float
    completed: float  # math.inf when the outcome is unknown
    value: Any = None  # the value written by a put
    result: Any = None  # the value a get returned (MISSING for absent)
    certain: bool = True  # False: the write may or may not have taken effect

    def __post_init__(self) -> None:
        if self.kind not in ("put", "delete", "get"):
            raise ValueError(f"unknown operation kind {self.kind}")


@dataclass(frozen=True)
class Verdict:
    ok: bool
    key: str | None = None
    detail: str = ""


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def check_key(operations: list[Operation], initial: Any = MISSING) -> bool:
    ops = sorted(operations, key=lambda op: (op.invoked, op.completed))
    count = len(ops)
    required_mask = 0
    for index, op in enumerate(ops):
        if op.certain:
            required_mask |= 1 << index
    seen: set[tuple[int, Any]] = set()
    stack: list[tuple[int, Any]] = [(0, _freeze(initial))]
    while stack:
        done, value = stack.pop()
        if done & required_mask == required_mask:
            return True
        if (done, value) in seen:
            continue
        seen.add((done, value))
        # The next op to take effect must have been invoked before every pending op completed.
        horizon = math.inf
        for index in range(count):
            if not done >> index & 1 and ops[index].completed < horizon:
                horizon = ops[index].completed
        for index in range(count):
            if done >> index & 1:
                continue
            op = ops[index]
            if op.invoked > horizon:
                break
            if op.kind == "get":
                if _freeze(op.result) != value:
                    continue
                new_value = value
            elif op.kind == "put":
                new_value = _freeze(op.value)
            else:
                new_value = _freeze(MISSING)
            stack.append((done | 1 << index, new_value))
    return False


def check_history(operations: Iterable[Operation]) -> Verdict:
    by_key: dict[str, list[Operation]] = defaultdict(list)
    for op in operations:
        by_key[op.key].append(op)
    for key in sorted(by_key):
        if not check_key(by_key[key]):
            ops = sorted(by_key[key], key=lambda op: op.invoked)
            lines = "\n".join(
                f"  client {op.client} {op.kind} value={op.value!r} result={op.result!r} "
                f"[{op.invoked}, {op.completed}]{'' if op.certain else ' (outcome unknown)'}"
                for op in ops
            )
            return Verdict(False, key, f"history of key [{key}] is not linearizable:\n{lines}")
    return Verdict(True)
