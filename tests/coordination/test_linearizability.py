from __future__ import annotations

import math

from coordinated.simulation.linearizability import MISSING, Operation, check_history


def op(kind: str, start: float, end: float, value: object = None, result: object = None, certain: bool = True):
    return Operation(0, "k", kind, start, end, value=value, result=result, certain=certain)


def test_sequential_history_is_linearizable() -> None:
    history = [op("get", 0, 1, result=MISSING), op("put", 2, 3, value=1), op("get", 4, 5, result=1)]
    assert check_history(history).ok


def test_stale_read_after_a_completed_write_is_not() -> None:
    history = [op("put", 0, 1, value=1), op("put", 2, 3, value=2), op("get", 4, 5, result=1)]
    verdict = check_history(history)
    assert not verdict.ok
    assert verdict.key == "k"


def test_concurrent_operations_may_take_effect_in_either_order() -> None:
    history = [op("put", 0, 10, value=1), op("get", 1, 2, result=MISSING), op("get", 3, 4, result=1)]
    assert check_history(history).ok
    history = [op("put", 0, 10, value=1), op("get", 1, 2, result=1), op("get", 3, 4, result=MISSING)]
    assert not check_history(history).ok


def test_a_write_with_unknown_outcome_may_or_may_not_have_happened() -> None:
    unknown = op("put", 0, math.inf, value=1, certain=False)
    assert check_history([unknown, op("get", 5, 6, result=MISSING)]).ok
    assert check_history([unknown, op("get", 5, 6, result=1)]).ok
    # but it cannot happen before it was invoked
    assert not check_history([op("get", 0, 1, result=1), op("put", 2, math.inf, value=1, certain=False)]).ok


def test_deletes_make_keys_missing() -> None:
    history = [op("put", 0, 1, value=1), op("delete", 2, 3), op("get", 4, 5, result=MISSING)]
    assert check_history(history).ok
