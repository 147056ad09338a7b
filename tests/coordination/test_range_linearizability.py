"""The checker of range reads and prefix deletes: each spans the keys under a prefix, so those keys are one
register, as for multi-key transactions. A range read must return exactly the keys one state held under its
prefix, in key order, with their values and versions; a prefix delete removes them all at once. The random
schedules run range clients through every fault and must pass it; it fails them when a node serves a range
read without waiting until it has applied the version its read barrier named."""

from __future__ import annotations

import math

import pytest

from coordinated.simulation import cluster as simulated
from coordinated.simulation.chaos import run_random_schedule
from coordinated.simulation.linearizability import TxnOperation, check_transactions

Entry = tuple[str, object, int]


def put(start: float, end: float, key: str, value: object, version: int | None) -> TxnOperation:
    certain = end != math.inf
    return TxnOperation(0, start, end, (), (("put", key, value),), (), True if certain else None, version)


def delete_prefix(start: float, end: float, prefix: str, version: int) -> TxnOperation:
    return TxnOperation(1, start, end, (), (("delete_prefix", prefix, None),), (), True, version)


def listing(start: float, end: float, prefix: str, *entries: Entry) -> TxnOperation:
    return TxnOperation(2, start, end, (), (("range", prefix, None),), (), True, ranges=(entries,))


def test_a_listing_shows_every_key_written_before_it_and_none_deleted() -> None:
    history = [
        put(0, 1, "r/a", 1, 3),
        put(2, 3, "r/b", 2, 4),
        listing(4, 5, "r/", ("r/a", 1, 3), ("r/b", 2, 4)),
        delete_prefix(6, 7, "r/", 5),
        listing(8, 9, "r/"),
        put(10, 11, "r/c", 3, 6),
        listing(12, 13, "r/b"),
        listing(12, 13, "r/", ("r/c", 3, 6)),
    ]
    assert check_transactions(history).ok


def test_a_listing_that_misses_a_key_acknowledged_before_it_is_not_linearizable() -> None:
    history = [put(0, 1, "r/a", 1, 3), put(2, 3, "r/b", 2, 4), listing(4, 5, "r/", ("r/b", 2, 4))]
    assert not check_transactions(history).ok


def test_a_listing_out_of_key_order_or_with_a_wrong_version_is_not_linearizable() -> None:
    writes = [put(0, 1, "r/a", 1, 3), put(2, 3, "r/b", 2, 4)]
    assert not check_transactions([*writes, listing(4, 5, "r/", ("r/b", 2, 4), ("r/a", 1, 3))]).ok
    assert not check_transactions([*writes, listing(4, 5, "r/", ("r/a", 1, 9), ("r/b", 2, 4))]).ok


def test_a_prefix_delete_is_all_or_nothing_to_a_listing() -> None:
    writes = [put(0, 1, "r/a", 1, 3), put(0, 1, "r/b", 2, 4)]
    torn = listing(5, 7, "r/", ("r/b", 2, 4))  # overlaps the delete, but sees half of it
    assert not check_transactions([*writes, delete_prefix(4, 8, "r/", 5), torn]).ok
    before = listing(5, 7, "r/", ("r/a", 1, 3), ("r/b", 2, 4))
    assert check_transactions([*writes, delete_prefix(4, 8, "r/", 5), before]).ok


def test_a_write_of_unknown_outcome_may_show_in_a_listing_which_reveals_its_version() -> None:
    history = [put(0, math.inf, "r/a", 1, None), listing(4, 5, "r/", ("r/a", 1, 7)), listing(6, 7, "r/", ("r/a", 1, 7))]
    assert check_transactions(history).ok
    assert not check_transactions([*history, listing(8, 9, "r/", ("r/a", 1, 8))]).ok


def limited_delete(
    start: float, end: float, prefix: str, limit: int, seen: tuple[int, bool], version: int
) -> TxnOperation:
    return TxnOperation(1, start, end, (), (("delete_prefix", prefix, (limit, seen)),), (), True, version)


def test_a_limited_prefix_delete_removes_the_first_keys_in_key_order_and_says_whether_any_is_left() -> None:
    writes = [put(0, 1, "r/c", 3, 3), put(0, 1, "r/a", 1, 4), put(0, 1, "r/b", 2, 5)]
    first = limited_delete(2, 3, "r/", 2, (2, True), 6)
    assert check_transactions([*writes, first, listing(4, 5, "r/", ("r/c", 3, 3))]).ok
    assert not check_transactions([*writes, first, listing(4, 5, "r/", ("r/a", 1, 4))]).ok, "not the first in order"
    assert not check_transactions([*writes, limited_delete(2, 3, "r/", 2, (2, False), 6)]).ok, "one was left"
    assert not check_transactions([*writes, limited_delete(2, 3, "r/", 5, (2, False), 6)]).ok, "three were there"
    rest = limited_delete(6, 7, "r/", 2, (1, False), 7)
    assert check_transactions([*writes, first, rest, listing(8, 9, "r/")]).ok


@pytest.mark.slow  # random schedules: make test runs it, make test-fast does not
def test_the_random_schedules_with_range_clients_pass_the_check() -> None:
    for seed in (1, 4, 8):
        report = run_random_schedule(seed, 3 + seed % 5, ranges=2)
        assert report.range_linearizability is not None and report.range_linearizability.ok, seed
        assert report.listings > 10


@pytest.mark.slow  # random schedules: make test runs it, make test-fast does not
def test_the_check_fails_range_reads_that_do_not_wait_for_their_read_barrier(monkeypatch: pytest.MonkeyPatch) -> None:
    def at_once(self: simulated.SimulatedCluster, node: int, version: int, then: object) -> None:
        state = self.nodes[node].coordinator
        then(state.applied_state if state is not None else None)  # type: ignore[operator]

    monkeypatch.setattr(simulated.SimulatedCluster, "when_applied", at_once)
    verdicts = [run_random_schedule(seed, 3 + seed % 5, ranges=2).range_linearizability for seed in range(10, 20)]
    assert any(verdict is not None and not verdict.ok and not verdict.undecided for verdict in verdicts)


def test_two_acknowledged_puts_of_a_key_with_one_version_are_not_linearizable() -> None:
    """As for a single key: a version names one write, here among prefix deletes and range reads too."""
    first = TxnOperation(1, 0, 2, (), (("put", "r/a", 1),), (), True, 7)
    second = TxnOperation(2, 0, 2, (), (("put", "r/a", 2),), (), True, 7)
    listed = TxnOperation(3, 3, 4, (), (("range", "r/", None),), (), True, ranges=((("r/a", 2, 7),),))
    assert not check_transactions([first, second, listed]).ok
    later = TxnOperation(2, 0, 2, (), (("put", "r/a", 2),), (), True, 8)
    listed = TxnOperation(3, 3, 4, (), (("range", "r/", None),), (), True, ranges=((("r/a", 2, 8),),))
    assert check_transactions([first, later, listed]).ok
