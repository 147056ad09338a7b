"""The checker of multi-key transactions: the keys of a transaction change together, so they are one register."""

from __future__ import annotations

import math

from coordinated.simulation.linearizability import MISSING, TxnOperation, check_transactions

A, B = "acct/a", "acct/b"
READ_BOTH = (("get", A, None), ("get", B, None))


def read_both(start: float, end: float, a: object, a_version: int, b: object, b_version: int) -> TxnOperation:
    return TxnOperation(0, start, end, (), READ_BOTH, (), True, None, ((A, a, a_version), (B, b, b_version)))


def transfer(
    start: float,
    end: float,
    versions: tuple[int, int],
    values: tuple[int, int],
    succeeded: bool | None,
    version: int | None = None,
) -> TxnOperation:
    return TxnOperation(
        1,
        start,
        end,
        ((A, versions[0]), (B, versions[1])),
        (("put", A, values[0]), ("put", B, values[1])),
        READ_BOTH,
        succeeded,
        version,
    )


def test_a_sequence_of_transfers_and_reads_is_linearizable() -> None:
    history = [
        read_both(0, 1, MISSING, 0, MISSING, 0),
        transfer(2, 3, (0, 0), (-1, 1), True, 5),
        read_both(4, 5, -1, 5, 1, 5),
        transfer(6, 7, (5, 5), (-2, 2), True, 9),
        read_both(8, 9, -2, 9, 2, 9),
    ]
    assert check_transactions(history).ok


def test_two_transfers_from_the_same_versions_cannot_both_succeed() -> None:
    history = [transfer(0, 3, (0, 0), (-1, 1), True, 5), transfer(1, 4, (0, 0), (-1, 1), True, 6)]
    verdict = check_transactions(history)
    assert not verdict.ok and "not linearizable" in verdict.detail


def test_a_read_that_sees_one_key_of_a_transfer_but_not_the_other_is_torn() -> None:
    history = [transfer(0, 10, (0, 0), (-1, 1), True, 5), read_both(2, 3, -1, 5, MISSING, 0)]
    assert not check_transactions(history).ok
    concurrent_but_whole = [transfer(0, 10, (0, 0), (-1, 1), True, 5), read_both(2, 3, -1, 5, 1, 5)]
    assert check_transactions(concurrent_but_whole).ok


def test_a_transfer_refused_by_its_compares_must_see_other_versions_in_its_failure_reads() -> None:
    refused_wrongly = TxnOperation(
        1, 0, 1, ((A, 0), (B, 0)), (("put", A, -1), ("put", B, 1)), READ_BOTH, False, None,
        ((A, MISSING, 0), (B, MISSING, 0)),
    )  # fmt: skip
    assert not check_transactions([refused_wrongly]).ok


def test_a_transfer_of_unknown_outcome_may_be_revealed_by_a_later_read_or_never_happen() -> None:
    uncertain = transfer(0, math.inf, (0, 0), (-1, 1), None)
    assert check_transactions([uncertain, read_both(5, 6, -1, 7, 1, 7)]).ok
    assert check_transactions([uncertain, read_both(5, 6, MISSING, 0, MISSING, 0)]).ok
    assert not check_transactions([uncertain, read_both(5, 6, -1, 7, MISSING, 0)]).ok
    # Once a read saw it, a later read cannot see the state before it.
    history = [uncertain, read_both(5, 6, -1, 7, 1, 7), read_both(8, 9, MISSING, 0, MISSING, 0)]
    assert not check_transactions(history).ok


def test_a_search_over_its_budget_is_undecided_not_a_verdict() -> None:
    uncertain = [
        TxnOperation(client, 0, math.inf, (), (("put", f"k{client}", client),), (), None) for client in range(2, 14)
    ]
    # A read of values nobody wrote: only an exhaustive search over which uncertain puts took effect refutes it.
    impossible = read_both(5, 6, 99, 7, 99, 7)
    verdict = check_transactions([*uncertain, impossible], max_states=50)
    assert not verdict.ok and verdict.undecided and "exceeded 50 states" in verdict.detail
    refuted = check_transactions([*uncertain, impossible])
    assert not refuted.ok and not refuted.undecided
