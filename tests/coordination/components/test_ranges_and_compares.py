"""Range reads, prefix deletes, richer transaction compares and previous values, in the core: the master's
batch decides them against the state it builds; a page of a range read comes from one state."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from coordinated.coordination.batch_keys import BatchKeys
from coordinated.coordination.client import ClusterError, Committed, PrevKey, SessionInfo, TxnResult
from coordinated.coordination.ranges import range_page
from coordinated.coordination.registry import default_settings
from coordinated.coordination.requests import request_problem
from coordinated.coordination.requests.keys import KvDelete, KvDeletePrefix, KvPut
from coordinated.coordination.requests.sessions import SessionCreate
from coordinated.coordination.requests.transactions import CompareOp, Txn, TxnCompare, TxnOp, compare_holds
from coordinated.coordination.state import ClusterState, Derivations, KeyVersion, Session, compute_diff
from coordinated.coordination.state_index import SessionKeys, SortedKeys, prefix_end
from coordinated.coordination.validation import key_prefix_problem

from .harness import OneNode, leader, result_of


def committed(node: OneNode, request: Any) -> Committed:
    result = result_of(node, request)
    assert isinstance(result, Committed), result
    return result


def state_of(node: OneNode) -> ClusterState:
    return node.coordinator.applied_state


# -- compares --------------------------------------------------------------------------------------------

ABSENT = None
KEY = (KeyVersion(7, 3), {"b": [1, 2], "a": "x"})


@pytest.mark.parametrize(
    ("compare", "key", "holds"),
    [
        (TxnCompare("k", 7), KEY, True),
        (TxnCompare("k", 7, op="!="), KEY, False),
        (TxnCompare("k", 8, op="<"), KEY, True),
        (TxnCompare("k", 6, op=">"), KEY, True),
        (TxnCompare("k", 0), ABSENT, True),  # a missing key's version is 0
        (TxnCompare("k", 0, op=">"), ABSENT, False),
        (TxnCompare("k", create_version=3), KEY, True),
        (TxnCompare("k", create_version=3, op="<"), KEY, False),
        (TxnCompare("k", create_version=4, op="<"), KEY, True),
        (TxnCompare("k", create_version=0), ABSENT, True),
        (TxnCompare("k", value={"a": "x", "b": [1, 2]}), KEY, True),  # object keys in any order
        (TxnCompare("k", value={"a": "x"}), KEY, False),
        (TxnCompare("k", value={"a": "x"}, op="!="), KEY, True),
        (TxnCompare("k", value=None), ABSENT, False),  # a value compare never holds on a missing key
        (TxnCompare("k", value=None, op="!="), ABSENT, False),
    ],
)
def test_a_compare_on_version_create_version_or_value(compare: TxnCompare, key: Any, holds: bool) -> None:
    versions, value = key if key is not None else (None, None)
    assert compare_holds(compare, versions, value) is holds


@pytest.mark.parametrize(
    ("value", "op", "given", "holds"),
    [
        (5, "<", 10, True),
        (5, ">", 10, False),
        (5.5, ">", 5, True),
        ("apple", "<", "banana", True),
        ("b", ">", "a", True),
        (5, "<", "10", False),  # a number and a string are never ordered
        (True, "<", 2, False),  # nor booleans
        ([1], "<", 2, False),
        (1, "=", 1.0, False),  # values compare as their JSON: 1 and 1.0 differ
        (1, "=", 1, True),
    ],
)
def test_values_are_ordered_only_between_numbers_or_strings(value: Any, op: CompareOp, given: Any, holds: bool) -> None:
    assert compare_holds(TxnCompare("k", value=given, op=op), KeyVersion(1, 1), value) is holds


def test_a_transaction_compares_the_values_and_versions_of_the_state_its_batch_builds() -> None:
    node = leader()
    created = committed(node, KvPut("cfg", {"replicas": 3})).version
    committed(node, KvPut("cfg", {"replicas": 5}))
    swap = Txn(
        compare=(TxnCompare("cfg", value={"replicas": 5}), TxnCompare("cfg", create_version=created)),
        success=(TxnOp("put", "cfg", {"replicas": 7}, prev_value=True),),
        failure=(TxnOp("get", "cfg"),),
    )
    result = result_of(node, swap)
    assert isinstance(result, TxnResult) and result.succeeded, result
    assert result.results[0].prev == PrevKey({"replicas": 5}, created + 1, created)
    again = result_of(node, swap)
    assert isinstance(again, TxnResult) and not again.succeeded and again.results[0].value == {"replicas": 7}


@pytest.mark.parametrize(
    ("txn", "problem"),
    [
        (Txn(compare=(TxnCompare("k"),)), "exactly one of [version], [create_version] and [value]"),
        (Txn(compare=(TxnCompare("k", 1, value=2),)), "exactly one of"),
        (Txn(compare=(TxnCompare("k", value={"a": 1}, op="<"),)), "give a number or a string"),
        (Txn(success=(TxnOp("delete_prefix"),)), "needs a [prefix]"),
        (Txn(success=(TxnOp("delete_prefix", "k", prefix="p"),)), "takes only a [prefix]"),
        (Txn(success=(TxnOp("delete_prefix", prefix="_p"),)), "reserved"),
        (Txn(success=(TxnOp("put", "k", 1, prefix="p"),)), "takes no [prefix]"),
        (Txn(success=(TxnOp("get", "k", prev_value=True),)), "takes no [prev_value]"),
    ],
)
def test_malformed_compares_and_ops_are_refused_naming_the_problem(txn: Txn, problem: str) -> None:
    reason = request_problem(txn, ClusterState(cluster_name="t"), default_settings())
    assert reason is not None and problem in reason, reason
    result = result_of(leader(), txn)
    assert isinstance(result, ClusterError) and result.status == 400 and problem in result.reason


def test_compares_travel_as_before_when_they_compare_versions_for_equality() -> None:
    """What a follower of an earlier version sends, and what it accepts: `{"key","version"}` only."""
    assert msgspec.json.encode(TxnCompare("k", 3)) == b'{"key":"k","version":3}'
    assert msgspec.json.decode(b'{"key":"k","version":3}', type=TxnCompare) == TxnCompare("k", 3)


# -- previous values -------------------------------------------------------------------------------------


def test_a_put_or_delete_can_return_the_previous_value() -> None:
    node = leader()
    first = committed(node, KvPut("k", "one", prev_value=True))
    assert first.prev is None  # it did not exist
    second = committed(node, KvPut("k", "two", prev_value=True))
    assert second.prev == PrevKey("one", first.version, first.version)
    gone = committed(node, KvDelete("k", prev_value=True))
    assert gone.prev == PrevKey("two", second.version, first.version)
    missing = committed(node, KvDelete("k", prev_value=True))  # nothing to delete: answered after a round
    assert missing.prev is None and missing.version == gone.version
    assert committed(node, KvPut("plain", 1)).prev is msgspec.UNSET


# -- prefix deletes --------------------------------------------------------------------------------------


def test_a_prefix_delete_removes_every_key_under_it_in_one_state_ephemeral_keys_included() -> None:
    node = leader()
    session = result_of(node, SessionCreate(ttl_ms=60_000))
    assert isinstance(session, SessionInfo)
    for key in ("app/a", "app/b/c", "apple", "other"):
        committed(node, KvPut(key, key))
    committed(node, KvPut("app/eph", 1, session=session.id))
    before = state_of(node).version
    deleted = committed(node, KvDeletePrefix("app/"))
    assert deleted.deleted == 3 and deleted.version == before + 1
    state = state_of(node)
    assert sorted(state.kv) == ["apple", "other"] and not state.kv_sessions
    assert session.id in state.sessions  # the session stays; only its key went
    none = committed(node, KvDeletePrefix("app/"))
    assert none.deleted == 0 and none.version == deleted.version
    assert committed(node, KvDeletePrefix("")).deleted == 2 and not state_of(node).kv


def test_a_delete_prefix_op_runs_in_order_with_the_other_ops_of_its_transaction() -> None:
    node = leader()
    for key in ("cfg/a", "cfg/b"):
        committed(node, KvPut(key, 1))
    reset = Txn(success=(TxnOp("delete_prefix", prefix="cfg/"), TxnOp("put", "cfg/a", 2), TxnOp("get", "cfg/b")))
    result = result_of(node, reset)
    assert isinstance(result, TxnResult) and result.succeeded, result
    cleared, put, get = result.results
    assert (cleared.op, cleared.key, cleared.deleted) == ("delete_prefix", "cfg/", 2)
    assert put.version == result.version and not get.found
    assert dict(state_of(node).kv) == {"cfg/a": 2}


def test_the_batch_finds_the_keys_under_a_prefix_among_those_it_wrote_itself() -> None:
    base = ClusterState(cluster_name="t", version=4, state_uuid="s4", kv={"p/a": 1, "q": 2})
    keys = BatchKeys(base, 5, keys_with_prefix=SortedKeys().at(base).with_prefix)
    keys.put("p/b", 3)
    keys.put("p/c", 4)
    keys.delete("p/c")
    assert keys.delete_prefix("p/") == (2, False)
    assert dict(keys.kv.items()) == {"q": 2}


@pytest.mark.parametrize("indexed", [True, False])
def test_a_limited_prefix_delete_takes_the_first_keys_in_key_order_base_and_batch_alike(indexed: bool) -> None:
    base = ClusterState(cluster_name="t", version=4, state_uuid="s4", kv={"p/a": 1, "p/c": 2, "p/e": 3, "q": 4})
    index = SortedKeys().at(base).with_prefix if indexed else None
    keys = BatchKeys(base, 5, keys_with_prefix=index)
    keys.put("p/b", 5)  # written by this batch: among them in key order
    keys.put("p/d", 6)
    keys.delete("p/a")  # deleted by this batch: not counted, not left
    assert keys.delete_prefix("p/", 2) == (2, True)
    assert sorted(dict(keys.kv.items())) == ["p/d", "p/e", "q"]
    assert keys.delete_prefix("p/", 2) == (2, False), "exactly the limit left: none more"
    assert keys.delete_prefix("p/", 2) == (0, False)
    assert sorted(dict(keys.kv.items())) == ["q"]


def test_a_prefix_delete_with_a_limit_says_more_and_a_transactions_ops_too() -> None:
    node = leader()
    for key in ("big/1", "big/2", "big/3", "other"):
        committed(node, KvPut(key, 1))
    first = committed(node, KvDeletePrefix("big/", limit=2))
    assert (first.deleted, first.more) == (2, True) and sorted(state_of(node).kv) == ["big/3", "other"]
    last = committed(node, KvDeletePrefix("big/", limit=2))
    assert (last.deleted, last.more) == (1, False)
    for key in ("big/1", "big/2", "big/3"):
        committed(node, KvPut(key, 2))
    result = result_of(node, Txn(success=(TxnOp("delete_prefix", prefix="big/"),), delete_limit=2))
    assert isinstance(result, TxnResult) and result.succeeded, result
    (op,) = result.results
    assert (op.deleted, op.more) == (2, True) and sorted(state_of(node).kv) == ["big/3", "other"]
    unbounded = committed(node, KvDeletePrefix(""))  # a previous release's node asks without a limit: all go
    assert (unbounded.deleted, unbounded.more) == (2, False) and not state_of(node).kv


# -- the indexes and the pages ---------------------------------------------------------------------------


DERIVATIONS = Derivations()  # this module's, as a node's would be


def states(*kvs: dict[str, Any]) -> list[ClusterState]:
    """States derived one from another, as batches derive them (so that their diffs are recorded)."""
    built = [ClusterState(cluster_name="t", version=1, state_uuid="s1", kv=kvs[0])]
    for number, kv in enumerate(kvs[1:], start=2):
        state = built[-1].replace(version=number, state_uuid=f"s{number}", parent_uuid=built[-1].state_uuid, kv=kv)
        DERIVATIONS.record(built[-1], state, compute_diff(built[-1], state))
        built.append(state)
    return built


def test_sorted_keys_follow_the_states_by_their_diffs() -> None:
    first, second, third = states({"b": 1, "a/x": 2}, {"b": 1, "a/x": 3, "a/y": 4, "c": 5}, {"a/y": 4, "c": 6})
    index = SortedKeys(DERIVATIONS).at(first)
    assert list(index.with_prefix("")) == ["a/x", "b"]
    index.advance(first, second)
    assert list(index.with_prefix("a/")) == ["a/x", "a/y"] and index.count("a/") == 2
    assert list(index.with_prefix("a/", after="a/x")) == ["a/y"]
    assert list(index.with_prefix("a/", after="0")) == ["a/x", "a/y"]  # an `after` below the prefix
    index.advance(second, third)
    assert list(index.with_prefix("")) == ["a/y", "c"] and index.count("") == 2 and index.count("b") == 0
    index.advance(first, third)  # not the state indexed: forgotten, built again when used
    assert list(index.at(third).with_prefix("")) == ["a/y", "c"]
    assert prefix_end("a/") == "a0" and prefix_end("") == ""


def test_session_keys_follow_the_states_by_their_diffs() -> None:
    base = ClusterState(
        cluster_name="t", version=1, state_uuid="s1", kv={"e1": 1, "e2": 2}, kv_sessions={"e1": "s", "e2": "s"}
    )
    moved = base.replace(version=2, state_uuid="s2", parent_uuid="s1", kv_sessions={"e1": "s", "e2": "t"})
    index = SessionKeys().at(base)
    assert index.of("s") == {"e1", "e2"}
    index.advance(base, moved)
    assert index.of("s") == {"e1"} and index.of("t") == {"e2"} and index.of("u") == frozenset()


def test_a_page_holds_at_most_its_limit_or_its_bytes_and_names_where_the_next_continues() -> None:
    kv = {f"k/{i:02d}": {"n": i} for i in range(10)}
    state = ClusterState(
        cluster_name="t",
        version=9,
        state_uuid="s9",
        kv=kv,
        kv_versions={key: KeyVersion(9, 2) for key in kv},
        sessions={"s": Session(10_000)},
        kv_sessions={"k/03": "s"},
    )
    index = SortedKeys().at(state)
    page = range_page(state, index.with_prefix("k/"), limit=4)
    assert [entry.key for entry in page.keys] == ["k/00", "k/01", "k/02", "k/03"]
    assert page.more and page.next == "k/03" and page.version == 9
    assert page.keys[3].session == "s" and msgspec.json.decode(page.keys[0].value) == {"n": 0}
    rest = range_page(state, index.with_prefix("k/", after=page.next), limit=100)
    assert [entry.key for entry in rest.keys] == [f"k/{i:02d}" for i in range(4, 10)] and not rest.more
    small = range_page(state, index.with_prefix("k/"), limit=100, max_bytes=150)
    assert 1 <= len(small.keys) < 10 and small.more
    single = range_page(state, index.with_prefix("k/"), limit=100, max_bytes=1)
    assert len(single.keys) == 1  # a page always holds a key, however large
    bare = range_page(state, index.with_prefix("k/"), limit=2, keys_only=True)
    assert msgspec.json.encode(bare.keys[0]) == b'{"key":"k/00","version":9,"create_version":2}'
    empty = range_page(state, index.with_prefix("none/"))
    assert empty.keys == [] and not empty.more and empty.next is None


@pytest.mark.parametrize(
    ("prefix", "valid"),
    [("", True), ("a/", True), ("x" * 256, True), ("x" * 257, False), ("_a", False), ("a\n", False)],
)
def test_prefix_names(prefix: str, valid: bool) -> None:
    assert (key_prefix_problem(prefix) is None) is valid
