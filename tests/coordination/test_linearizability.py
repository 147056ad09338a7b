from __future__ import annotations

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_the_search_budget_makes_a_hard_history_undecided_not_endless() -> None:
    # Concurrent puts whose values are all read later: every order is possible, so the search is large.
    puts = [Operation(i, "k", "put", 0, 100, value=i) for i in range(12)]
    reads = [Operation(20 + i, "k", "get", 101 + 2 * i, 102 + 2 * i, result=i) for i in range(12)]
    verdict = check_history(puts + reads, max_states_per_key=50)
    assert not verdict.ok
    assert "undecided" in verdict.detail


def test_many_unread_uncertain_writes_are_checked_quickly() -> None:
    # 40 failed writes whose outcome is unknown and whose values nobody read, then a stale read. Proving that
    # no linearization exists means ruling out every subset of those writes: 2^40 without pruning them, and
    # immediate with it (the budget turns a regression into "undecided").
    history = []
    for i in range(40):
        history.append(Operation(1, "k", "put", 3 * i, math.inf, value=f"lost-{i}", certain=False))
        history.append(Operation(2, "k", "put", 3 * i + 1, 3 * i + 2, value=i))
        history.append(Operation(3, "k", "get", 3 * i + 2.5, 3 * i + 2.9, result=i))
    assert check_history(history, max_states_per_key=100_000).ok
    stale = Operation(3, "k", "get", 200, 201, result=0)
    verdict = check_history([*history, stale], max_states_per_key=100_000)
    assert not verdict.ok
    assert "not linearizable" in verdict.detail


def brute_force_linearizable(ops: list[Operation]) -> bool:
    """The definition, by exhaustion: some order of all certain ops plus any subset of uncertain ones that
    respects real time and register semantics."""
    certain = [op for op in ops if op.certain]
    uncertain = [op for op in ops if not op.certain]
    for size in range(len(uncertain) + 1):
        for chosen in itertools.combinations(uncertain, size):
            for order in itertools.permutations(certain + list(chosen)):
                if any(b.completed < a.invoked for i, a in enumerate(order) for b in order[i + 1 :]):
                    continue
                value: object = MISSING
                for op in order:
                    if op.kind == "put":
                        value = op.value
                    elif op.kind == "delete":
                        value = MISSING
                    elif op.result != value:
                        break
                else:
                    return True
    return False


@st.composite
def small_histories(draw: st.DrawFn) -> list[Operation]:
    ops = []
    for client in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["put", "delete", "get"]))
        invoked = draw(st.integers(0, 8))
        certain = kind == "get" or draw(st.booleans())
        completed = invoked + draw(st.integers(1, 4)) if certain else math.inf
        value = draw(st.integers(1, 3)) if kind == "put" else None
        result = draw(st.sampled_from([MISSING, 1, 2, 3])) if kind == "get" else None
        ops.append(Operation(client, "k", kind, invoked, completed, value, result, certain))
    return ops


@settings(max_examples=400, deadline=None)
@given(small_histories())
def test_checker_agrees_with_the_definition(history: list[Operation]) -> None:
    assert check_history(history).ok == brute_force_linearizable(history)


def cas(
    start: float, end: float, value: object, if_version: int, version: int | None = None, **kw: object
) -> Operation:
    return Operation(0, "k", "put", start, end, value=value, if_version=if_version, version=version, **kw)  # type: ignore[arg-type]


def test_two_increments_from_the_same_version_cannot_both_succeed() -> None:
    read = Operation(0, "k", "get", 0, 1, result=0, version=5)
    setup = Operation(0, "k", "put", -3, -2, value=0, version=5)
    first = cas(2, 3, 1, if_version=5, version=6)
    assert check_history([setup, read, first]).ok
    lost_update = cas(4, 5, 1, if_version=5, version=7)  # applied against version 5 after version 6 was written
    assert not check_history([setup, read, first, lost_update]).ok
    # Concurrent with the first, it could have gone first only if the first had then been refused.
    both = [cas(2, 10, 1, if_version=5, version=6), cas(2, 10, 1, if_version=5, version=7)]
    assert not check_history([setup, read, *both]).ok


def test_a_refused_conditional_write_needs_another_version_at_some_point_of_its_interval() -> None:
    setup = Operation(0, "k", "put", 0, 1, value="a", version=3)
    assert not check_history([setup, cas(2, 3, "b", if_version=3, conflict=True)]).ok
    assert check_history([setup, cas(2, 3, "b", if_version=4, conflict=True)]).ok
    # A concurrent write explains the refusal.
    concurrent = Operation(0, "k", "put", 2, 5, value="c", version=4)
    assert check_history([setup, concurrent, cas(2, 6, "b", if_version=3, conflict=True)]).ok
    # Create-only: refused only where the key exists.
    assert not check_history([cas(0, 1, "x", if_version=0, conflict=True)]).ok
    assert check_history([cas(0, 1, "x", if_version=0, version=1), cas(2, 3, "y", if_version=0, conflict=True)]).ok


def test_a_write_of_unknown_outcome_leaves_the_version_unknown_until_a_read_sees_it() -> None:
    setup = Operation(0, "k", "put", 0, 1, value=0, version=2)
    unknown = cas(2, math.inf, 1, if_version=2, certain=False)
    seen = Operation(0, "k", "get", 3, 4, result=1, version=9)
    assert check_history([setup, unknown, seen, cas(5, 6, 2, if_version=9, version=10)]).ok
    assert not check_history([setup, unknown, seen, cas(5, 6, 2, if_version=8, version=10)]).ok


# -- a version names one write ------------------------------------------------------------------------------


def put(client: int, start: float, end: float, value: object, version: int | None, **kw: object) -> Operation:
    return Operation(client, "k", "put", start, end, value=value, version=version, **kw)  # type: ignore[arg-type]


def test_the_lost_update_of_issue_50_is_not_linearizable() -> None:
    """Two PUTs of one key both got version 6074 (one batch), a read saw the second, and the first writer's
    compare-and-set on 6074 then succeeded: the second acknowledged write was lost without a 409. Read as the
    server stamped the versions, that history was linearizable; where a version names one write, it is not."""
    first, second = put(1, 0, 10, "a", 6074), put(2, 1, 10, "b", 6074)
    read = Operation(3, "k", "get", 11, 12, result="b", version=6074)
    cas_on_own = put(1, 13, 14, "c", 6075, if_version=6074)
    assert not check_history([first, second, read, cas_on_own]).ok
    assert not check_history([first, second]).ok  # two acknowledged writes with one version, whatever follows
    # With a version each, the same compare-and-set is refused (the read found 6075, not the writer's 6074).
    second = put(2, 1, 10, "b", 6075)
    read = Operation(3, "k", "get", 11, 12, result="b", version=6075)
    refused = put(1, 13, 14, "c", None, if_version=6074, conflict=True)
    assert check_history([put(1, 0, 10, "a", 6074), second, read, refused]).ok
    assert not check_history([put(1, 0, 10, "a", 6074), second, read, put(1, 13, 14, "c", 6076, if_version=6074)]).ok


def test_versions_grow_with_every_write_of_a_key() -> None:
    assert check_history([put(1, 0, 1, "a", 5), put(1, 2, 3, "b", 7)]).ok
    assert not check_history([put(1, 0, 1, "a", 7), put(1, 2, 3, "b", 5)]).ok
    # A delete in between is a write without a version of the key: the next put is still above the last one.
    delete = Operation(1, "k", "delete", 2, 3, version=8)
    assert not check_history([put(1, 0, 1, "a", 7), delete, put(1, 4, 5, "b", 6)]).ok
    # A delete of an absent key batched ahead of a put answers that put's version: not a version of the key.
    absent_delete = Operation(2, "k", "delete", 0, 3, version=9)
    assert check_history(
        [absent_delete, put(1, 0, 3, "b", 9), Operation(3, "k", "get", 4, 5, result="b", version=9)]
    ).ok


def test_a_compare_and_set_on_a_version_means_nothing_was_written_since() -> None:
    setup = put(1, 0, 1, "a", 5)
    # A write of unknown outcome that took effect since has a version of its own, above 5: a later compare on 5
    # then cannot hold, whatever that version was. Its value read later proves that it took effect.
    unknown = put(2, 2, math.inf, "u", None, certain=False)
    cas = put(1, 3, 4, "c", 9, if_version=5)
    read_u = Operation(3, "k", "get", 5, 6, result="u")
    assert check_history([setup, unknown, cas]).ok  # it may not have taken effect before the compare
    assert not check_history([setup, unknown, Operation(3, "k", "get", 2.5, 2.8, result="u"), cas]).ok
    assert check_history([setup, unknown, cas, read_u]).ok  # it took effect after the compare
    # A version a read reveals of a write of unknown outcome is never an acknowledged put's.
    revealed = Operation(3, "k", "get", 5, 6, result="u", version=9)
    assert not check_history([setup, unknown, cas, revealed]).ok


def test_a_refusal_found_the_current_version() -> None:
    setup = put(1, 0, 1, "a", 5)
    assert check_history([setup, put(2, 2, 3, "b", None, if_version=4, conflict=True, certain=True)]).ok
    found_5 = put(2, 2, 3, "b", 5, if_version=4, conflict=True)
    found_6 = put(2, 2, 3, "b", 6, if_version=4, conflict=True)
    assert check_history([setup, found_5]).ok and not check_history([setup, found_6]).ok
    # Found 6: a write of unknown outcome gave it (so it took effect), or an acknowledged one did.
    assert check_history([setup, put(3, 1.5, math.inf, "u", None, certain=False), found_6]).ok
    absent = put(2, 2, 3, "b", 0, if_version=4, conflict=True)
    assert not check_history([setup, absent]).ok
    assert check_history([setup, Operation(3, "k", "delete", 1.5, 1.8, version=6), absent]).ok


def test_uncertain_writes_that_refusals_cannot_have_seen_are_checked_quickly() -> None:
    """Refusals that name an acknowledged put's version observe that put, not a write of unknown outcome: 40 of
    those, unread, are left out of the search (2^40 orders otherwise)."""
    history = []
    for i in range(40):
        history.append(put(1, 3 * i, math.inf, f"lost-{i}", None, certain=False))
        history.append(put(2, 3 * i + 1, 3 * i + 2, i, 10 + 2 * i))
        history.append(put(3, 3 * i + 2.1, 3 * i + 2.9, "x", 10 + 2 * i, if_version=1, conflict=True))
    assert check_history(history, max_states_per_key=100_000).ok
    stale = put(3, 200, 201, "x", 10, if_version=1, conflict=True)
    assert not check_history([*history, stale], max_states_per_key=100_000).ok
